package kubeletsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Config configures a Simulator. Zero values take the defaults in brackets.
type Config struct {
	// Nodes is how many Ready nodes to register [3].
	Nodes int
	// NodePrefix names the nodes PREFIX0, PREFIX1, ... [sim-node-].
	NodePrefix string
	// PullDelay is how long an image pull takes [200ms].
	PullDelay time.Duration
	// StartDelay is how long a started container takes to become ready [200ms].
	StartDelay time.Duration
	// SlowStartDelay replaces StartDelay for images tagged slow* [10s].
	SlowStartDelay time.Duration
	// ScheduleDelay is how long a new pod waits to be bound to a node: the scheduler's share
	// of a pod start [0].
	ScheduleDelay time.Duration
	// SandboxDelay is how long a newly bound pod waits before its containers are created: the
	// pod sandbox, its network and IP, and its volumes mounted. An image update in place does
	// not pay it [0].
	SandboxDelay time.Duration
	// BackOff is the kubelet's initial crash back-off (10 s on a real node), also before
	// ErrImagePull turns into ImagePullBackOff [1s]. Back-offs double up to 30 times it and are
	// forgotten 60 times it after their last use, as the kubelet's 5 minutes and 10 minutes.
	BackOff time.Duration
	// StopDelay is how long a container whose image changed keeps running, and is reported
	// Running (Ready if it was) with its old containerID and image, before it is stopped and the
	// new image pulled: a real kubelet reported the old container for about a second after the
	// patch; scaled as StartDelay [200ms].
	StopDelay time.Duration
	// ResizeDelay is how long a resize the node has room for, and that restarts no container,
	// takes to reach the container: PodResizeInProgress shows meanwhile, and then the
	// container's status reports the new resources. A real kubelet reported them about a second
	// after the patch; scaled as StopDelay [200ms].
	ResizeDelay time.Duration
	// RequestRate is how many requests per second each Ready pod serves [20].
	RequestRate float64
	// MetricsAddr is where the metrics and control endpoint listens [127.0.0.1:0].
	MetricsAddr string
	// Registries are the hosts (HOST:PORT) of real OCI registries: images on them are resolved
	// through the registry with the pod's imagePullSecrets, and each node keeps what it pulled.
	// Images on any other host resolve through the built-in tag-to-digest map [none].
	Registries []string
	// Workers is how many pods are synced at once [4].
	Workers int
	// Logger receives one line per event. Nil discards.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.NodePrefix == "" {
		c.NodePrefix = "sim-node-"
	}
	def(&c.PullDelay, 200*time.Millisecond)
	def(&c.StartDelay, 200*time.Millisecond)
	def(&c.SlowStartDelay, 10*time.Second)
	def(&c.BackOff, time.Second)
	def(&c.StopDelay, 200*time.Millisecond)
	def(&c.ResizeDelay, 200*time.Millisecond)
	if c.RequestRate == 0 {
		c.RequestRate = 20
	}
	if c.MetricsAddr == "" {
		c.MetricsAddr = "127.0.0.1:0"
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Simulator plays the kubelet (and the scheduler) for a set of nodes.
type Simulator struct {
	client kubernetes.Interface
	cfg    Config
	t      timings
	log    *slog.Logger

	mu       sync.Mutex
	pods     map[types.UID]*podSim
	unbound  map[types.UID]time.Time // when each pod waiting for ScheduleDelay was first seen
	reg      registry
	traffic  bool
	nextIP   []int // per node, the last pod IP index handed out
	bindNext int

	nodes    []string
	lister   corelisters.PodLister
	queue    workqueue.TypedRateLimitingInterface[string]
	listener net.Listener
	server   *http.Server
	wg       sync.WaitGroup
	now      func() time.Time
}

// New returns a simulator; Start registers its nodes and begins serving pods.
func New(client kubernetes.Interface, cfg Config) (*Simulator, error) {
	cfg.setDefaults()
	if cfg.Nodes < 1 || cfg.Nodes > 200 {
		return nil, fmt.Errorf("kubelet simulator: nodes must be between 1 and 200, got %d", cfg.Nodes)
	}
	s := &Simulator{
		client:  client,
		cfg:     cfg,
		t:       timings{pull: cfg.PullDelay, start: cfg.StartDelay, slowStart: cfg.SlowStartDelay, backoff: cfg.BackOff, sandbox: cfg.SandboxDelay, stop: cfg.StopDelay, resize: cfg.ResizeDelay},
		log:     cfg.Logger,
		pods:    map[types.UID]*podSim{},
		unbound: map[types.UID]time.Time{},
		traffic: true,
		nextIP:  make([]int, cfg.Nodes),
		now:     time.Now,
	}
	s.reg.remote = newRemoteRegistries(cfg.Registries, func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
		return client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	})
	for i := range cfg.Nodes {
		s.nodes = append(s.nodes, fmt.Sprintf("%s%d", cfg.NodePrefix, i))
	}
	return s, nil
}

// NodeNames returns the names of the simulated nodes.
func (s *Simulator) NodeNames() []string { return append([]string(nil), s.nodes...) }

// Start registers the nodes, starts the metrics endpoint and the pod workers, and returns once
// the pod cache has synced. Cancel ctx to stop; Wait waits for the workers to end.
func (s *Simulator) Start(ctx context.Context) error {
	for i := range s.nodes {
		if err := s.registerNode(ctx, i); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", s.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("listening for metrics on %s: %w", s.cfg.MetricsAddr, err)
	}
	s.listener = ln
	s.server = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("metrics server stopped", "err", err)
		}
	}()

	factory := informers.NewSharedInformerFactory(s.client, 0)
	podInformer := factory.Core().V1().Pods()
	s.lister = podInformer.Lister()
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubeletsim"})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				s.forget(pod.UID)
			} else if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if pod, ok := tomb.Obj.(*corev1.Pod); ok {
					s.forget(pod.UID)
				}
			}
		},
	}); err != nil {
		return fmt.Errorf("watching pods: %w", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return fmt.Errorf("kubelet simulator: pod cache did not sync: %w", ctx.Err())
	}
	// Before any worker allocates: pods a previous simulator ran on these nodes keep their IPs.
	pods, err := s.lister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing pods to adopt: %w", err)
	}
	s.seedPodIPs(pods)
	for range s.cfg.Workers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for s.processNext(ctx) {
			}
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		s.queue.ShutDown()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.server.Shutdown(shutdownCtx)
		factory.Shutdown()
	}()
	s.log.Info("kubelet simulator started", "nodes", len(s.nodes), "metrics", s.MetricsURL())
	return nil
}

// Wait blocks until the simulator has stopped after its context was cancelled.
func (s *Simulator) Wait() { s.wg.Wait() }

// Run starts the simulator and blocks until ctx is cancelled.
func (s *Simulator) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	s.Wait()
	return nil
}

// MetricsURL is the base URL of the metrics and control endpoint (metrics at /metrics).
func (s *Simulator) MetricsURL() string {
	if s.listener == nil {
		return ""
	}
	return "http://" + s.listener.Addr().String()
}

// Retag points an image tag at a new digest, as pushing a different image under the same tag
// does. Containers started afterwards from that tag report the new imageID; running ones keep
// the image they started with.
func (s *Simulator) Retag(image, digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if img, err := parseImage(image); err == nil && s.reg.remote.handles(img) {
		return fmt.Errorf("retag %q: the image is on a real registry, whose tags the simulator does not override; push new content under the tag instead (crane)", image)
	}
	if err := s.reg.retag(image, digest); err != nil {
		return err
	}
	s.log.Info("retagged", "image", image, "digest", digest)
	return nil
}

// SetTraffic turns the simulated request traffic of every pod on or off.
func (s *Simulator) SetTraffic(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked(s.now())
	s.traffic = on
	s.log.Info("traffic", "enabled", on)
}

// Serving reports whether the pod uid would answer a request now: the simulator runs it and
// every one of its containers runs Ready, none being stopped. It is the truth the API lags
// behind: a container whose image changed stops when the simulator sees the change, before the
// pod's status says so, and a deleted pod stops when the simulator sees the deletion.
func (s *Simulator) Serving(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[uid]
	if p == nil || len(p.containers) == 0 {
		return false
	}
	for _, sims := range []map[string]*containerSim{p.containers, p.sidecars} {
		for _, c := range sims {
			if c.phase != phaseReady {
				return false
			}
		}
	}
	return true
}

func (s *Simulator) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pods[uid]; p != nil {
		delete(s.pods, uid)
		s.retryDeferredLocked(p.node)
	}
}

// retryDeferredLocked has the pods of node whose resize waits for room (Deferred) synced again,
// as the kubelet retries pending resizes when a pod leaves the node or a resize is allocated.
func (s *Simulator) retryDeferredLocked(node string) {
	for _, p := range s.pods {
		if p.node == node && p.pending != nil && p.pending.reason == ResizeDeferred {
			s.queue.Add(p.namespace + "/" + p.name)
		}
	}
}

// othersLocked returns what the pods on node other than self were allocated: the cpu
// (millicores) and memory (bytes) requests of those not finished, as the kubelet counts its
// active pods when it admits a resize.
func (s *Simulator) othersLocked(self *podSim) (cpu, memory int64) {
	for _, p := range s.pods {
		if p == self || p.node != self.node || p.allocated == nil || p.phase == corev1.PodSucceeded || p.phase == corev1.PodFailed {
			continue
		}
		c, m := podRequests(p.read, p.allocated)
		cpu, memory = cpu+c, memory+m
	}
	return cpu, memory
}

func (s *Simulator) registerNode(ctx context.Context, i int) error {
	name := s.nodes[i]
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
	}}
	if _, err := s.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", name, err)
	}
	capacity := nodeAllocatable.DeepCopy()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := s.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s: %w", name, err)
		}
		// The TaintNodesByCondition admission plugin taints a new node not-ready; a kubelet's
		// first Ready status lets the node lifecycle controller lift it. That controller does not
		// run here, so the simulator lifts it itself.
		if len(n.Spec.Taints) > 0 {
			n.Spec.Taints = nil
			if n, err = s.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		now := metav1.Now()
		n.Status.Capacity, n.Status.Allocatable = capacity, capacity
		n.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: s.hostIP(i)},
			{Type: corev1.NodeHostName, Address: name},
		}
		n.Status.NodeInfo.KubeletVersion = "v1.34.5"
		n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = "linux", "amd64"
		n.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet simulator is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID", LastHeartbeatTime: now, LastTransitionTime: now},
		}
		_, err = s.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func (s *Simulator) hostIP(node int) string { return fmt.Sprintf("172.18.0.%d", node+2) }

func (s *Simulator) nodeIndex(name string) int {
	for i, n := range s.nodes {
		if n == name {
			return i
		}
	}
	return -1
}

func (s *Simulator) processNext(ctx context.Context) bool {
	key, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	defer s.queue.Done(key)
	after, err := s.syncPod(ctx, key)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("pod sync failed; retrying", "pod", key, "err", err)
		}
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	if after > 0 {
		s.queue.AddAfter(key, after)
	}
	return true
}

// syncPod does one kubelet step for a pod: bind it, finish its deletion, or bring its status up
// to date. It returns when the pod should be looked at again.
func (s *Simulator) syncPod(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pod, err := s.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if pod.Spec.NodeName == "" {
		if wait := s.scheduleWait(pod.UID); wait > 0 {
			return wait, nil
		}
		return 0, s.bind(ctx, pod)
	}
	node := s.nodeIndex(pod.Spec.NodeName)
	if node < 0 {
		return 0, nil // another kubelet's pod
	}
	if pod.DeletionTimestamp != nil {
		// The containers are gone at once; the kubelet then removes the pod object.
		err := s.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr(int64(0)),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return 0, fmt.Errorf("finishing deletion of pod %s: %w", key, err)
		}
		s.forget(pod.UID)
		return 0, nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, nil
	}

	now := s.now()
	s.mu.Lock()
	p := s.pods[pod.UID]
	if p == nil {
		ip := pod.Status.PodIP // an adopted pod keeps its IP
		if ip == "" {
			ip = s.allocatePodIP(node)
		}
		p = newPodSim(pod, ip, s.hostIP(node), now)
		p.node = pod.Spec.NodeName
		if pod.Status.StartTime == nil { // new here, not adopted from an earlier simulator
			p.sandboxReady = now.Add(s.t.sandbox)
		}
		s.pods[pod.UID] = p
	}
	s.tickPodLocked(p, now)
	before := restartsOf(p)
	p.others = func() (int64, int64) { return s.othersLocked(p) }
	status, next := p.sync(pod, now, s.t, &s.reg)
	if p.resized {
		s.retryDeferredLocked(p.node)
	}
	after := restartsOf(p)
	s.mu.Unlock()

	for c, n := range after {
		if n != before[c] {
			s.log.Info("container restarted", "pod", key, "container", c, "restartCount", n)
		}
	}
	if !equality.Semantic.DeepEqual(pod.Status, status) {
		if err := s.patchStatus(ctx, pod, status); err != nil {
			return 0, err
		}
	}
	if next.IsZero() {
		return 0, nil
	}
	return max(next.Sub(now), time.Millisecond), nil
}

func restartsOf(p *podSim) map[string]int32 {
	out := make(map[string]int32, len(p.containers)+len(p.sidecars))
	// Container names are unique across a pod's containers and init containers.
	for _, sims := range []map[string]*containerSim{p.containers, p.sidecars} {
		for name, c := range sims {
			out[name] = c.restarts
		}
	}
	return out
}

// patchStatus writes the kubelet-owned part of the status with a strategic-merge patch, which
// merges conditions by type and so keeps readiness-gate conditions other writers own.
func (s *Simulator) patchStatus(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus) error {
	fields := map[string]any{
		"observedGeneration":    status.ObservedGeneration,
		"phase":                 status.Phase,
		"hostIP":                status.HostIP,
		"hostIPs":               status.HostIPs,
		"podIP":                 status.PodIP,
		"podIPs":                status.PodIPs,
		"startTime":             status.StartTime,
		"conditions":            ownConditionsPatch(pod.Status.Conditions, status.Conditions),
		"containerStatuses":     status.ContainerStatuses,
		"initContainerStatuses": status.InitContainerStatuses,
	}
	// Only a pod the kubelet stopped (DeadlineExceeded) has a reason of its own.
	if status.Reason != "" {
		fields["reason"], fields["message"] = status.Reason, status.Message
	}
	patch := map[string]any{"metadata": map[string]any{"uid": pod.UID}, "status": fields}
	data, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("encoding status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	_, err = s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// scheduleWait returns how long an unbound pod still waits for the simulated scheduler, counting
// from when the simulator first saw it.
func (s *Simulator) scheduleWait(uid types.UID) time.Duration {
	if s.cfg.ScheduleDelay <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	seen, ok := s.unbound[uid]
	if !ok {
		s.unbound[uid] = now
		return s.cfg.ScheduleDelay
	}
	if wait := seen.Add(s.cfg.ScheduleDelay).Sub(now); wait > 0 {
		return wait
	}
	delete(s.unbound, uid)
	return 0
}

// bind plays the scheduler: a pod whose affinity (a DaemonSet's) or nodeSelector names a node
// goes there, a real node's included, any other pod to the simulated nodes in turn.
func (s *Simulator) bind(ctx context.Context, pod *corev1.Pod) error {
	node := requiredNodeName(pod)
	if node == "" {
		s.mu.Lock()
		node = s.nodes[s.bindNext%len(s.nodes)]
		s.bindNext++
		s.mu.Unlock()
	} else if s.nodeIndex(node) < 0 {
		// Another kubelet's node: bound there only if it exists, as a scheduler would.
		if _, err := s.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{ResourceVersion: "0"}); err != nil {
			return nil
		}
	}
	err := s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // deleted, or bound meanwhile; the watch brings the news
	}
	if err != nil {
		return fmt.Errorf("binding pod %s/%s to %s: %w", pod.Namespace, pod.Name, node, err)
	}
	s.log.Info("bound", "pod", pod.Namespace+"/"+pod.Name, "node", node)
	return nil
}

// requiredNodeName returns the node a pod's required node affinity pins it to by name, as the
// DaemonSet controller does, or its nodeSelector on kubernetes.io/hostname.
func requiredNodeName(pod *corev1.Pod) string {
	if h := pod.Spec.NodeSelector[corev1.LabelHostname]; h != "" {
		return h
	}
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

func (s *Simulator) allocatePodIP(node int) string {
	s.nextIP[node]++
	return podIP(node, s.nextIP[node])
}

// podIP is the n-th pod IP of a node.
func podIP(node, n int) string { return fmt.Sprintf("10.%d.%d.%d", 100+node, n/250, n%250+1) }

// podIPIndex inverts podIP: the n that gives ip on node, and false if ip is not one of node's
// pod IPs.
func podIPIndex(node int, ip string) (int, bool) {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !addr.Is4() {
		return 0, false
	}
	o := addr.As4()
	if o[0] != 10 || int(o[1]) != 100+node || o[3] < 1 || o[3] > 250 {
		return 0, false
	}
	return int(o[2])*250 + int(o[3]) - 1, true
}

// seedPodIPs moves each node's IP counter past the highest IP a pod on that node holds. A
// restarted simulator adopts the pods already running, and a new pod must not be handed an IP
// one of them has.
func (s *Simulator) seedPodIPs(pods []*corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pod := range pods {
		node := s.nodeIndex(pod.Spec.NodeName)
		if node < 0 {
			continue
		}
		if n, ok := podIPIndex(node, pod.Status.PodIP); ok && n > s.nextIP[node] {
			s.nextIP[node] = n
		}
	}
	for i, n := range s.nextIP {
		if n > 0 {
			s.log.Info("pod IPs continue after those of adopted pods", "node", s.nodes[i], "lastAdopted", podIP(i, n))
		}
	}
}

// Digest returns the digest an image reference resolves to now, as a registry would answer.
// An image on one of Config.Registries is asked of that registry, without credentials.
func (s *Simulator) Digest(image string) (string, error) {
	img, err := parseImage(image)
	if err != nil {
		return "", err
	}
	if s.reg.remote.handles(img) {
		ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
		defer cancel()
		d, err := s.reg.remote.resolve(ctx, img, pullEnv{})
		if err != nil {
			return "", fmt.Errorf("resolving %s through its registry: %w", img.normalized, err)
		}
		return d, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reg.digestOf(img), nil
}

// Config returns the simulator's configuration with defaults applied.
func (s *Simulator) Config() Config { return s.cfg }
