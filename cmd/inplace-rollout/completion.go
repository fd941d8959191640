package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
)

// completionTimeout bounds the requests of one shell completion: a shell waits for it.
const completionTimeout = 5 * time.Second

// targetKinds are what --target completes to before a kind is chosen.
var targetKinds = []string{"statefulset/", "daemonset/", "deployment/", "pods"}

// registerCompletions completes, from the cluster the connection flags name, --namespace (the
// namespaces), --target (the kinds, then the workloads of the kind in the namespace) and, for
// the commands that take them, --image (CONTAINER= of the target's containers) and --requests and
// --limits (CONTAINER=, then cpu= and memory=). A request that fails completes nothing: a shell
// shows no error.
func (f *clusterFlags) registerCompletions(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("namespace", f.completeNamespaces)
	_ = cmd.RegisterFlagCompletionFunc("target", f.completeTarget)
	if cmd.Flags().Lookup("image") != nil {
		_ = cmd.RegisterFlagCompletionFunc("image", f.completeImage)
	}
	for _, flag := range []string{"requests", "limits"} {
		if cmd.Flags().Lookup(flag) != nil {
			_ = cmd.RegisterFlagCompletionFunc(flag, f.completeResources)
		}
	}
}

// completionClient is a client for one completion, and the namespace the flags give.
func (f *clusterFlags) completionClient() (kubernetes.Interface, string, bool) {
	loader := f.config.ToRawKubeConfigLoader()
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", false
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", false
	}
	cfg.Timeout = completionTimeout
	client, err := kubernetes.NewForConfig(cfg)
	return client, ns, err == nil
}

func (f *clusterFlags) completeNamespaces(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	client, _, ok := f.completionClient()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, n := range list.Items {
		if strings.HasPrefix(n.Name, toComplete) {
			out = append(out, n.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (f *clusterFlags) completeTarget(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	kindStr, prefix, chosen := strings.Cut(toComplete, "/")
	if !chosen {
		var out []string
		for _, k := range targetKinds {
			if strings.HasPrefix(k, strings.ToLower(toComplete)) {
				out = append(out, k)
			}
		}
		// No space after "statefulset/": the name follows.
		return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	client, ns, ok := f.completionClient()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	names, err := workloadNames(ctx, client, ns, kindStr)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, name := range names {
		if strings.HasPrefix(name, prefix) {
			out = append(out, kindStr+"/"+name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// workloadNames lists the names of the workloads of kind in ns.
func workloadNames(ctx context.Context, client kubernetes.Interface, ns, kindStr string) ([]string, error) {
	kind, err := rollout.ParseKind(kindStr)
	if err != nil {
		return nil, err
	}
	var names []string
	switch kind {
	case rollout.StatefulSet:
		list, err := client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			names = append(names, o.Name)
		}
	case rollout.DaemonSet:
		list, err := client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			names = append(names, o.Name)
		}
	case rollout.Deployment:
		list, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, o := range list.Items {
			names = append(names, o.Name)
		}
	}
	return names, nil
}

// completeImage completes CONTAINER= from the containers (and native sidecars) of the
// --target given before it.
func (f *clusterFlags) completeImage(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if strings.Contains(toComplete, "=") || f.target == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	client, ns, ok := f.completionClient()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	spec, err := templateOf(ctx, client, ns, f.target)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, c := range spec.Containers {
		out = append(out, c.Name+"=")
	}
	for _, c := range spec.InitContainers {
		if rollout.NativeSidecar(c) {
			out = append(out, c.Name+"=")
		}
	}
	var matching []string
	for _, o := range out {
		if strings.HasPrefix(o, toComplete) {
			matching = append(matching, o)
		}
	}
	// No space after "app=": the image follows.
	return matching, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

// completeResources completes a --requests or --limits value: CONTAINER= as --image does, then
// the resources a resize changes that the value does not name yet (app=cpu=200m,memory=).
func (f *clusterFlags) completeResources(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	container, values, ok := strings.Cut(toComplete, "=")
	if !ok {
		return f.completeImage(cmd, args, toComplete)
	}
	done, typing := "", values
	if i := strings.LastIndex(values, ","); i >= 0 {
		done, typing = values[:i+1], values[i+1:]
	}
	if strings.Contains(typing, "=") {
		// A quantity follows: nothing to offer.
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, name := range resourceNames {
		n := string(name)
		if strings.HasPrefix(n, typing) && !strings.HasPrefix(done, n+"=") && !strings.Contains(done, ","+n+"=") {
			out = append(out, container+"="+done+n+"=")
		}
	}
	// No space after "cpu=": the quantity follows.
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

// templateOf reads the pod template of the workload KIND/NAME in ns.
func templateOf(ctx context.Context, client kubernetes.Interface, ns, target string) (*corev1.PodSpec, error) {
	kindStr, name, _ := strings.Cut(target, "/")
	kind, err := rollout.ParseKind(kindStr)
	if err != nil {
		return nil, err
	}
	switch kind {
	case rollout.StatefulSet:
		o, err := client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &o.Spec.Template.Spec, nil
	case rollout.DaemonSet:
		o, err := client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &o.Spec.Template.Spec, nil
	case rollout.Deployment:
		o, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &o.Spec.Template.Spec, nil
	}
	return &corev1.PodSpec{}, nil
}
