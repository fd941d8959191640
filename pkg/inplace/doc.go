// Package inplace updates the container images of one pod in place and can put them back.
//
// It computes an image-only diff, records each changed container's BeforeImage and
// BeforeImageID in the pod's inplace-rollout.io/state annotation, patches the images, judges
// completion and failure from the kubelet's container statuses, and reverts to the recorded
// digest. The annotation is the only memory: every function takes the pod as it is now and
// returns the next write, so a restart at any instant resumes where it stopped.
package inplace
