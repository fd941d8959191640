// Package controller runs inplace-rollout controller, the InPlaceRollout controller, as a
// process authenticated as config/controller's ServiceAccount bound only to its roles, on the
// local control plane with its simulated kubelets: objects applied with the real kubectl roll
// their workloads in place, `kubectl wait` reads their conditions, Argo CD's health check and
// kstatus judge their real status, deletion and abort roll back, a SIGKILLed controller resumes,
// a webhook hears each outcome once; after every test, the roles are checked against the calls
// the controller made (the API server's audit log).
package controller
