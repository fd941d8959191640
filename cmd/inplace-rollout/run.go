package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"

	"github.com/inplace-rollout/inplace-rollout/pkg/notify"
	"github.com/inplace-rollout/inplace-rollout/pkg/registry"
	"github.com/inplace-rollout/inplace-rollout/pkg/rollout"
	"github.com/inplace-rollout/inplace-rollout/tekton/results"
)

// exitInterrupted is the exit code after Ctrl-C: the rollout is left resumable.
const exitInterrupted = 130

func newRunCommand() *cobra.Command {
	return newRolloutCommand(&cobra.Command{
		Use:   "run --target KIND/NAME [--image CONTAINER=IMAGE] [--requests|--limits CONTAINER=RESOURCE=QUANTITY,...] [flags]",
		Short: "Roll new images out to a workload's live pods, in place, batch by batch",
		Long: `run updates the images of a workload's live pods in place, batch by batch, and
waits for each pod to run its new image, Running and Ready. If a pod fails, or a
batch fails its analysis, every pod the rollout touched goes back to the exact image
it ran before and the workload is restored; run then exits 1.

--requests and --limits change containers' cpu and memory in place too, beside or
instead of images, through each pod's resize subresource (before its image patch): only
values a container declares, and the pod's QoS class stays as it is. A rollback resizes
the pods back.

--hooks runs a hook before each pod's change (preUpdate) and once it is Ready on its new
images (postUpdate), and around its revert by a rollback: an HTTP call to a port of the pod
through the API server's pod proxy, or a handshake (a pod condition set False, waited on
until another party sets it True). A hook runs at most once per pod and direction.

Running run again with the same arguments resumes a rollout that was interrupted
(Ctrl-C, a lost connection, a killed process); rollback undoes it.

--dry-run=server sends the writes that start the rollout (the workload's hold, and the image
patch of each pod of the first batch) with dryRun All, for the API server's admission to judge,
and changes nothing: exit 0 when it accepts them all, 7 when it refuses any, naming the object
and the policy. --dry-run=client prints the batches, as plan does, and sends nothing.`,
		Example: `  inplace-rollout run -n shop --target statefulset/db --image postgres=postgres:16.4 --batches 1,50%,100%
  inplace-rollout run --target deployment/api --image api=reg.example/api:v2 --soak 30s --analysis golden.yaml
  inplace-rollout run -n shop --target statefulset/db --image postgres=postgres:16.4 --dry-run=server
  inplace-rollout run -n shop --target statefulset/db --requests postgres=cpu=500m,memory=1Gi --limits postgres=cpu=1,memory=1Gi
  inplace-rollout run -n shop --target statefulset/web --image app=reg.example/app:v2 --hooks '{preUpdate: {http: {port: 8080, path: /hook/pre, method: POST}}}'`,
	}, false)
}

func newResumeCommand() *cobra.Command {
	return newRolloutCommand(&cobra.Command{
		Use:   "resume --target KIND/NAME [--image CONTAINER=IMAGE] [--requests|--limits CONTAINER=RESOURCE=QUANTITY,...] [flags]",
		Short: "Accept the batch an inconclusive analysis paused on, and continue the rollout",
		Long: `resume takes the same arguments as the run it continues. When the rollout is paused
by an inconclusive analysis, resume accepts the paused batch, as a person who looked
at it, and goes on like run; rollback undoes the rollout instead. Only the batch paused
on when resume starts is accepted: a later batch that pauses stops it again (exit 4).`,
	}, true)
}

// newRolloutCommand completes run or resume: the same flags and the same loop.
func newRolloutCommand(cmd *cobra.Command, resume bool) *cobra.Command {
	var cf clusterFlags
	var rf rolloutFlags
	// Images may also come as arguments, CONTAINER=IMAGE each: a Tekton Task passes an array
	// param only as whole arguments, never as the values of repeated flags.
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		rf.images = append(rf.images, args...)
		if rf.onTerminate != terminateLeave && rf.onTerminate != terminateRollback {
			return badInput("--on-terminate %q: want %s or %s", rf.onTerminate, terminateLeave, terminateRollback)
		}
		if err := checkDryRun(rf.dryRun); err != nil {
			return err
		}
		spec, client, err := rf.resolve(cmd, &cf)
		if err != nil {
			return err
		}
		if rf.dryRun != dryRunNone {
			return runDryRun(cmd, client, spec, rf.dryRun, cf.output)
		}
		return drive(cmd, client, cf.events, spec, driveOptions{resume: resume, onTerminate: rf.onTerminate, resultsDir: rf.resultsDir, output: cf.output})
	}
	cf.register(cmd)
	rf.register(cmd)
	cf.registerCompletions(cmd)
	if resume {
		rf.dryRun = dryRunNone
	} else {
		registerDryRun(cmd, &rf.dryRun)
	}
	return cmd
}

func newRollbackCommand() *cobra.Command {
	var cf clusterFlags
	var rf rolloutFlags
	cmd := &cobra.Command{
		Use:   "rollback --target KIND/NAME [flags]",
		Short: "Put every pod of the workload's last rollout back on the image it ran before",
		Long: `rollback undoes the workload's in-place rollout, in flight or finished: every pod
it touched goes back to the exact image it ran before (pinned by digest), in the
reverse order of the batches, and the workload gets its previous images and update
strategy back.

If someone else changed the workload's template while the rollout held it (the rollout
then stopped with reason TemplateChanged), rollback leaves their template as it is and
says so: the workload's own update strategy then applies it. --restore-template puts
the previous images back in the template instead.

A rollout another driver holds (an Argo Rollout, a Tekton CustomRun) is that driver's to roll
back. When that holder no longer exists (deleted mid-rollout), --take-over makes this command
its holder first; the drivers' own scans also roll such rollouts back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rf.checkNotify(); err != nil {
				return err
			}
			client, ref, err := cf.resolve()
			if err != nil {
				return err
			}
			r := rollout.RollbackSpec{Target: ref, Holder: "cli", RestoreTemplate: rf.restoreTemplate, TakeOver: rf.takeOver,
				GracePeriod: rf.grace, Timeout: rf.timeout, MaxUnavailable: intstr.Parse(rf.maxUnavailable)}
			return driveRollback(cmd, client, cf.events, r, rf.resultsDir, cf.output)
		},
	}
	cf.register(cmd)
	cf.registerCompletions(cmd)
	cmd.Flags().StringVar(&rf.maxUnavailable, "max-unavailable", "1", "pods reverted at once, count or percentage above 0")
	rf.registerTakeOver(cmd)
	rf.registerNotify(cmd)
	cmd.Flags().BoolVar(&rf.restoreTemplate, "restore-template", false, "put the previous images back in the template even if someone else changed it during the rollout")
	cmd.Flags().DurationVar(&rf.grace, "grace", 0, "wait between draining a pod and restarting it")
	cmd.Flags().DurationVar(&rf.timeout, "timeout", 10*time.Minute, "fail a pod that makes no progress for this long (above 0)")
	cmd.Flags().StringVar(&rf.resultsDir, "results-dir", "", "write Tekton-style results to this directory")
	return cmd
}

// interruptible is the context Ctrl-C (or SIGTERM) cancels: the engine completes the write in
// flight and stops before the next one.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// What Ctrl-C or SIGTERM does to a run's rollout in flight (--on-terminate).
const (
	// terminateLeave stops between two steps; the same command resumes.
	terminateLeave = "leave"
	// terminateRollback rolls the rollout back first: the step of a cancelled or timed-out
	// TaskRun gets SIGTERM when Tekton deletes its pod, and must not leave the workload held.
	terminateRollback = "rollback"
)

// driveOptions are how drive runs and reports: resume accepts the paused batch the rollout
// stands at; onTerminate is --on-terminate; resultsDir and output are where the outcome goes.
type driveOptions struct {
	resume                          bool
	onTerminate, resultsDir, output string
}

// drive runs the rollout until it settles, printing one line per change on stderr. With resume,
// a rollout paused by an inconclusive analysis when the command starts has its batch accepted
// first; a pause reached later stops the command as it stops run.
func drive(cmd *cobra.Command, client, events kubernetes.Interface, spec rollout.Spec, o driveOptions) error {
	d := newDriver(cmd, client, events, spec.Target, spec.Images, spec.Batches)
	defer d.closeEvents()
	ctx, stop := interruptible()
	defer stop()
	// The pod watch outlives a signal: the engine reads pods from it, and a rollback after the
	// signal (--on-terminate rollback) must see them change.
	watch, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	d.watchPods(watch, client, spec.Target)
	var st rollout.Status
	var err error
	if !o.resume {
		st, err = d.engine.Drive(ctx, spec, d.report)
	} else {
		// The first status says whether the rollout is paused now; resume accepts only that pause.
		first, pausedAtStart := true, false
		st, err = d.engine.Drive(ctx, spec, func(s rollout.Status) {
			if first {
				first, pausedAtStart = false, s.Phase == rollout.PhasePaused
				if pausedAtStart {
					return // the accepted batch is reported instead
				}
			}
			d.report(s)
		})
		if p, ok := rollout.PauseOf(st); ok && err == nil && pausedAtStart {
			st, err = d.engine.AcceptAndDrive(ctx, spec, p, d.report)
		}
	}
	if o.onTerminate == terminateRollback && rollout.OutcomeOf(st, err).Kind == rollout.Interrupted {
		return d.rollBackOnTerminate(spec, st, err, o)
	}
	return d.finish(st, err, o.resultsDir, o.output, false)
}

// rollBackOnTerminate rolls back, at the rollout's own pace, the rollout a signal stopped
// (--on-terminate rollback; stopped and stopErr are how the run ended), and ends as a run whose
// rollout rolled back. A second signal stops the rollback between two steps, left in flight for
// `inplace-rollout rollback` to finish. A signal before the rollout was recorded leaves nothing
// to roll back: the run ends as stopped.
func (d *driver) rollBackOnTerminate(spec rollout.Spec, stopped rollout.Status, stopErr error, o driveOptions) error {
	d.log.Warn("stopped by a signal: rolling the rollout back (--on-terminate rollback)", "target", d.target)
	ctx, stop := interruptible()
	defer stop()
	st, err := d.engine.DriveAbort(ctx, spec.Rollback(), d.report)
	switch rollout.OutcomeOf(st, err).Kind {
	case rollout.BadInput:
		return d.finish(stopped, stopErr, o.resultsDir, o.output, false)
	case rollout.Interrupted:
		return &exitError{code: exitInterrupted, err: fmt.Errorf("stopped again while rolling back; the rollback of %s is left in flight: run `inplace-rollout rollback` to finish it", d.target)}
	}
	return d.finish(st, err, o.resultsDir, o.output, false)
}

// driveRollback runs the rollback r until it ends, printing one line per change on stderr.
func driveRollback(cmd *cobra.Command, client, events kubernetes.Interface, r rollout.RollbackSpec, resultsDir, output string) error {
	d := newDriver(cmd, client, events, r.Target, nil, nil)
	defer d.closeEvents()
	ctx, stop := interruptible()
	defer stop()
	d.watchPods(ctx, client, r.Target)
	st, err := d.engine.DriveAbort(ctx, r, d.report)
	return d.finish(st, err, resultsDir, output, true)
}

// driver is what a command that drives the engine prints as it goes.
type driver struct {
	cmd    *cobra.Command
	engine *rollout.Driver
	events *rollout.EventBroadcaster // nil without a client
	// webhook sends the rollout's outcomes to --notify-url; nil without it.
	webhook *notify.Webhook
	log     *slog.Logger
	bar     *progressBar
	target  string
	batches []intstr.IntOrString
	// ref and images let a status that leaves a person a choice name the commands that make it.
	ref    rollout.Ref
	images map[string]string

	lastMsg     string
	lastMeasure time.Time
}

func newDriver(cmd *cobra.Command, client, events kubernetes.Interface, ref rollout.Ref, images map[string]string, batches []intstr.IntOrString) *driver {
	stderr := cmd.ErrOrStderr()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var recorder *rollout.EventBroadcaster
	if events != nil {
		var err error
		recorder, err = rollout.NewEventBroadcaster(events, func(err error) {
			log.Warn("event not recorded", "target", ref.String(), "err", err)
		})
		if err != nil {
			// Events are notices: the rollout goes on without them.
			log.Warn("events not recorded", "target", ref.String(), "err", err)
		}
	}
	// Commands without --pre-pull (rollback) start no pullers.
	pullerImage, _ := cmd.Flags().GetString("puller-image")
	d := &driver{
		cmd: cmd,
		engine: &rollout.Driver{Engine: &rollout.Engine{
			Client:      client,
			Registry:    &registry.Resolver{Client: client},
			PullerImage: pullerImage,
			Log:         log,
		}},
		log:     log,
		events:  recorder,
		bar:     newProgressBar(stderr),
		target:  ref.String(),
		batches: batches,
		ref:     ref,
		images:  images,
	}
	if recorder != nil {
		d.engine.Events = recorder.Recorder(cliComponent)
	}
	// --notify-url was checked with the other flags, before anything changed.
	if url, _ := cmd.Flags().GetString("notify-url"); url != "" {
		w, err := notify.NewWebhook(url, os.Getenv(notifyTokenEnv), log)
		if err != nil {
			log.Warn("notifications not sent", "target", ref.String(), "err", err)
		} else {
			d.webhook, d.engine.Notifier = w, w
		}
	}
	return d
}

// Events are recorded in the background; at the end the command waits up to eventDrain for the
// last ones.
const eventDrain = 30 * time.Second

// closeEvents records the Events, and sends the notifications, still queued before the command
// exits.
func (d *driver) closeEvents() {
	if d.events != nil {
		if err := d.events.Close(eventDrain); err != nil {
			d.log.Warn("events lost", "target", d.target, "err", err)
		}
	}
	if d.webhook != nil {
		if err := d.webhook.Close(eventDrain); err != nil {
			d.log.Warn("notifications lost", "target", d.target, "err", err)
		}
	}
}

// watchPods lets the engine step as soon as the target's pods change, instead of at the next
// interval, and read them from the watch's cache instead of listing them at every step. Without
// it (the workload is not there yet, or pods cannot be watched) the rollout goes on at its
// intervals, listing the pods from the API server.
func (d *driver) watchPods(ctx context.Context, client kubernetes.Interface, ref rollout.Ref) {
	w, err := rollout.WatchPods(ctx, client, ref)
	if err != nil {
		// A workload that cannot be read is the first step's to report.
		d.log.Debug("stepping at intervals", "target", d.target, "err", err)
		return
	}
	d.engine.Changes = w.Changes()
	d.engine.Pods = w
}

// report prints a step's status: a progress line when its message changed, a line per check
// of a new measurement, and the progress bar.
func (d *driver) report(st rollout.Status) {
	st = cliStatus(st, d.ref, d.images)
	if st.Message != d.lastMsg {
		d.bar.clear()
		attrs := []any{"target", d.target, "phase", st.Phase}
		if st.Batches > 0 {
			attrs = append(attrs, "batch", fmt.Sprintf("%d/%d", st.Batch, st.Batches))
		}
		d.log.Info("progress", append(attrs, "updated", st.Updated, "total", st.Total, "message", st.Message)...)
		d.lastMsg = st.Message
	}
	if a := st.Analysis; a != nil && len(a.Last) > 0 && a.Last[len(a.Last)-1].At.After(d.lastMeasure) {
		m := a.Last[len(a.Last)-1]
		d.lastMeasure = m.At
		d.bar.clear()
		for _, r := range m.Results {
			d.log.Info("measurement", "target", d.target, "batch", a.Batch, "check", r.Check, "verdict", r.Verdict, "result", r.String())
		}
	}
	d.bar.show(st, d.batches)
}

// finish turns what the engine returned into the command's output and exit code.
func (d *driver) finish(st rollout.Status, err error, resultsDir, output string, rollbackCmd bool) error {
	d.bar.clear()
	o := rollout.OutcomeOf(st, err)
	if o.Err != nil {
		if o.Kind == rollout.Interrupted {
			_ = writeResults(resultsDir, st)
		}
		return d.errorExit(o)
	}
	st = cliStatus(st, d.ref, d.images)
	if err := writeResults(resultsDir, st); err != nil {
		return &exitError{code: exitRollbackIncomplete, err: err}
	}
	if err := printStatus(d.cmd.OutOrStdout(), output, st); err != nil {
		return err
	}
	return phaseExit(o.Kind, rollbackCmd, st.Message)
}

// errorExit is the exit code and message of a command whose engine call ended with an error, as
// o says.
func (d *driver) errorExit(o rollout.Outcome) error {
	err := o.Err
	switch o.Kind {
	case rollout.Interrupted:
		return &exitError{code: exitInterrupted, err: fmt.Errorf("stopped; %s is left as it is. Run the same command again to resume, or `inplace-rollout rollback` to undo", d.target)}
	case rollout.BadInput:
		return &exitError{code: exitBadInput, err: cliError(err)}
	case rollout.Superseded:
		return &exitError{code: exitSuperseded, err: err}
	case rollout.Blocked:
		return &exitError{code: exitRollbackIncomplete, err: fmt.Errorf("%s: stopped, a person must look: %w", d.target, err)}
	case rollout.Refused:
		return d.refusedExit(o)
	case rollout.Unavailable:
		if o.RollingBack {
			return &exitError{code: exitRollbackIncomplete, err: fmt.Errorf("rollback incomplete: giving up after %s of errors from the API server; run `inplace-rollout rollback` again to finish it: %w", shortDuration(o.For), o.LastErr)}
		}
		return &exitError{code: exitAPIUnavailable, err: fmt.Errorf("giving up after %s of errors from the API server; %s is left as it is and the rollout is resumable: run the same command again: %w", shortDuration(o.For), d.target, o.LastErr)}
	}
	// The engine returns only the errors above; anything else is trouble it did not type.
	return &exitError{code: exitAPIUnavailable, err: err}
}

// refusedExit is the exit of a request the API server refused, as o says: the rollback left
// incomplete, the rollout left in flight, or nothing changed.
func (d *driver) refusedExit(o rollout.Outcome) error {
	err := o.Err
	switch {
	case o.RollingBack:
		return &exitError{code: exitRollbackIncomplete, err: fmt.Errorf("rollback incomplete: the API server refused a request, and retrying will not change that: %w; fix the cause, then run `inplace-rollout rollback` again", err)}
	case o.RolloutID != "":
		return &exitError{code: exitRollbackIncomplete, err: fmt.Errorf("the API server refused a request, and retrying will not change that: %w; rollout %s is left in flight (%d pods updated, %s still held): fix the cause, then run the same command again to resume, or `inplace-rollout rollback` to undo",
			err, o.RolloutID, o.Updated, d.target)}
	}
	if apierrors.IsNotFound(err) {
		// What the command names does not exist: its input is wrong.
		return &exitError{code: exitBadInput, err: fmt.Errorf("%w (nothing changed)", err)}
	}
	return &exitError{code: exitAPIRefused, err: fmt.Errorf("the API server refused a request, and retrying will not change that: %w (nothing changed)", err)}
}

// readExit is the exit of status or plan when reading the cluster failed: bad input when what
// the command names does not exist or its spec is wrong; refused when the API server refused a
// read for another reason (forbidden, unauthorized); unavailable when it could not be reached or
// could not answer (connection errors, timeouts, throttling, 5xx).
func readExit(err error) error {
	var status apierrors.APIStatus
	switch {
	case rollout.OutcomeOf(rollout.Status{}, err).Kind == rollout.BadInput, apierrors.IsNotFound(err):
		// Typed by the engine first: a spec it refuses may wrap a registry's connection error.
		return &exitError{code: exitBadInput, err: err}
	case errors.As(err, &status):
		if code := status.Status().Code; code == http.StatusTooManyRequests || code >= http.StatusInternalServerError ||
			apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) {
			return &exitError{code: exitAPIUnavailable, err: fmt.Errorf("the API server could not answer: %w; run the same command again", err)}
		}
		return &exitError{code: exitAPIRefused, err: fmt.Errorf("the API server refused a request: %w", err)}
	case unreachable(err):
		return &exitError{code: exitAPIUnavailable, err: fmt.Errorf("the API server could not be reached: %w; run the same command again", err)}
	}
	return &exitError{code: exitBadInput, err: err}
}

// unreachable reports whether err is a failure to reach the server (a refused or reset
// connection, a timeout, a name that does not resolve) rather than an answer. A certificate
// the client does not trust, or credentials it cannot get, are not: retrying does not help.
func unreachable(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	var netErr net.Error
	return errors.As(err, &opErr) || errors.As(err, &dnsErr) || (errors.As(err, &netErr) && netErr.Timeout()) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err)
}

// shortDuration prints whole minutes and hours without their zero seconds: 2m, not 2m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// phaseExit is the exit of a command whose rollout (or rollback) came to a status of kind k,
// with msg. A rollback that rolled back succeeded; a rollout that did failed.
func phaseExit(k rollout.OutcomeKind, rollbackCmd bool, msg string) error {
	switch {
	case k == rollout.Paused:
		return &exitError{code: exitPaused, err: errors.New(msg)}
	case k == rollout.Succeeded, k == rollout.Holding, k == rollout.RolledBack && rollbackCmd:
		return nil
	case k == rollout.RolledBack:
		return &exitError{code: exitFailedRolledBack, err: errors.New(msg)}
	default:
		return &exitError{code: exitRollbackIncomplete, err: errors.New(msg)}
	}
}

// writeResults writes Tekton-style result files (tekton/results) when --results-dir is given.
func writeResults(dir string, st rollout.Status) error {
	if dir == "" {
		return nil
	}
	return results.Write(dir, st)
}

// progressBar draws a live bar for the batch in progress when stderr is a terminal.
type progressBar struct {
	w  io.Writer
	on bool
}

func newProgressBar(w io.Writer) *progressBar {
	f, ok := w.(*os.File)
	return &progressBar{w: w, on: ok && term.IsTerminal(int(f.Fd()))}
}

func (b *progressBar) show(st rollout.Status, batches []intstr.IntOrString) {
	if b.on {
		fmt.Fprint(b.w, barLine(st, batches))
	}
}

// barLine draws the batch in progress: the bar fills with the batch's pods, from the count the
// batch starts at to the count it ends at.
func barLine(st rollout.Status, batches []intstr.IntOrString) string {
	from, to := 0, st.Total
	if counts, err := rollout.ResolveBatches(batches, st.Total); err == nil && st.Batch >= 1 && st.Batch <= len(counts) {
		to = counts[st.Batch-1]
		if st.Batch > 1 {
			from = counts[st.Batch-2]
		}
	}
	const width = 30
	done := 0
	if to > from {
		done = width * min(max(st.Updated-from, 0), to-from) / (to - from)
	}
	bar := strings.Repeat("#", done) + strings.Repeat(" ", width-done)
	return fmt.Sprintf("\r[%s] batch %d/%d: %d/%d pods  (%d/%d in all)  %s\033[K",
		bar, st.Batch, st.Batches, min(max(st.Updated-from, 0), to-from), to-from, st.Updated, st.Total, st.Phase)
}

func (b *progressBar) clear() {
	if b.on {
		fmt.Fprint(b.w, "\r\033[K")
	}
}

// resolve builds the client and the spec: from the flags, or from the -f file with the flags
// given over it.
func (f *rolloutFlags) resolve(cmd *cobra.Command, cf *clusterFlags) (rollout.Spec, kubernetes.Interface, error) {
	if err := f.checkNotify(); err != nil {
		return rollout.Spec{}, nil, err
	}
	if f.file == "" {
		client, ref, err := cf.resolve()
		if err != nil {
			return rollout.Spec{}, nil, err
		}
		spec, err := f.spec(ref)
		return spec, client, err
	}
	if err := checkOutput(cf.output); err != nil {
		return rollout.Spec{}, nil, err
	}
	client, ns, err := cf.client()
	if err != nil {
		return rollout.Spec{}, nil, err
	}
	spec, err := f.fileSpec(cmd, cf, ns)
	return spec, client, err
}
