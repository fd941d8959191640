package rollout

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/inplace-rollout/inplace-rollout/pkg/workload"
)

// Pacing of Drive.
const (
	// DefaultErrorBudget is how long Drive retries errors worth a retry before it gives up.
	DefaultErrorBudget = 2 * time.Minute
	// minRequeue keeps a step that asks to be called again at once from spinning.
	minRequeue = 50 * time.Millisecond
	// changeDebounce is the least Drive waits after a step when Changes says the pods
	// changed: a batch's pods change within moments of each other, and one step sees them all.
	changeDebounce = 50 * time.Millisecond
	// The retries of errors worth a retry wait firstBackoff, doubling up to maxBackoff.
	firstBackoff = time.Second
	maxBackoff   = 30 * time.Second
)

// APIUnavailableError says that steps kept failing with errors worth a retry (the API server
// unreachable, overloaded or timing out) for longer than the error budget. Nothing about the
// rollout was decided: the workload is left as it is, and the same call goes on from there.
type APIUnavailableError struct {
	Target workload.Ref
	// For is the error budget the errors outlasted.
	For time.Duration
	// RollingBack says the rollout was rolling back: the rollback is left part way, and goes on
	// when driven again.
	RollingBack bool
	// Err is the last error.
	Err error
}

func (e *APIUnavailableError) Error() string {
	what := "the rollout"
	if e.RollingBack {
		what = "its rollback"
	}
	return fmt.Sprintf("API trouble: requests for %s kept failing for more than %s; %s is left as it is and %s goes on when driven again: %v",
		e.Target, e.For, e.Target, what, e.Err)
}

func (e *APIUnavailableError) Unwrap() error { return e.Err }

// Driver takes an Engine's steps until a rollout settles: the loop every driver runs (the CLI,
// a goroutine per rollout in the Argo plugin process), with its waits between steps and its
// retries. The Engine decides and writes; the Driver only paces it.
type Driver struct {
	// Engine takes the steps; its methods (Record, Abort, ...) are the Driver's too.
	*Engine
	// ErrorBudget is how long Drive retries errors worth a retry before it gives up with an
	// *APIUnavailableError; zero means DefaultErrorBudget.
	ErrorBudget time.Duration
	// Changes, when set, cuts Drive's wait between two steps short: a value on it says the
	// target's pods changed (PodWatch.Changes), so the next step may have work; without it Drive
	// waits what each step asks.
	Changes <-chan struct{}

	// wait replaces Drive's timer in tests; nil waits on a real one.
	wait func(ctx context.Context, d time.Duration) error
}

// Drive reconciles spec until its rollout settles (Phase.Settled: it ended, paused, or holds
// at its hold point) and returns the last status. onStatus, when not nil, gets the status of
// every step. Errors worth a retry are retried with backoff (1s, doubling up to 30s) for up to
// ErrorBudget, then returned as an *APIUnavailableError; the other typed errors of Reconcile
// are returned at once, unchanged.
//
// Each step runs to its end even when ctx is cancelled, so that no write is cut off half way;
// a cancelled ctx stops Drive before the next step, with the last status and an error that
// wraps ctx.Err(). The rollout is then left as it is, and Drive with the same spec goes on.
func (e *Driver) Drive(ctx context.Context, spec Spec, onStatus func(Status)) (Status, error) {
	return e.drive(ctx, spec.Target, func(ctx context.Context, prev Status) (Status, time.Duration, error) {
		return e.Reconcile(ctx, spec, prev)
	}, onStatus)
}

// DriveAbort rolls back as Drive rolls out: it takes Abort's steps until the rollback ended
// (or needs a person), with the same retries, error budget and cancellation.
func (e *Driver) DriveAbort(ctx context.Context, r RollbackSpec, onStatus func(Status)) (Status, error) {
	return e.drive(ctx, r.Target, func(ctx context.Context, prev Status) (Status, time.Duration, error) {
		return e.Abort(ctx, r, prev)
	}, onStatus)
}

// AcceptAndDrive accepts the paused batch p (see Accept), retrying as Drive does while the
// API server is in trouble, then drives spec on like Drive. onStatus gets the accept's status
// too.
func (e *Driver) AcceptAndDrive(ctx context.Context, spec Spec, p Pause, onStatus func(Status)) (Status, error) {
	r := e.retrier(spec.Target)
	r.rolloutID = p.RolloutID
	for {
		if err := ctx.Err(); err != nil {
			return Status{}, fmt.Errorf("%s: stopped before accepting batch %d: %w", spec.Target, p.Batch, err)
		}
		// Like a step, the write completes even if ctx is cancelled meanwhile.
		st, err := e.Accept(context.WithoutCancel(ctx), spec.Target, spec.Holder, p)
		if err == nil {
			if onStatus != nil {
				onStatus(st)
			}
			return e.Drive(ctx, spec, onStatus)
		}
		wait, err := r.failed(err, false)
		if err != nil {
			return st, err
		}
		if err := e.sleep(ctx, wait); err != nil {
			return st, fmt.Errorf("%s: stopped before accepting batch %d: %w", spec.Target, p.Batch, err)
		}
	}
}

// drive is the loop of Drive and DriveAbort: step until the phase settles.
func (e *Driver) drive(ctx context.Context, target workload.Ref, step func(context.Context, Status) (Status, time.Duration, error), onStatus func(Status)) (Status, error) {
	r := e.retrier(target)
	var st Status
	for {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("%s: stopped between two steps: %w", target, err)
		}
		next, requeue, err := step(context.WithoutCancel(ctx), st)
		var wait time.Duration
		if err == nil {
			r.succeeded()
			st = next
			if onStatus != nil {
				onStatus(st)
			}
			if st.Phase.Settled() {
				return st, nil
			}
			wait = max(requeue, minRequeue)
		} else {
			r.rolloutID = st.RolloutID
			if wait, err = r.failed(err, st.Phase == PhaseRollingBack || next.Phase == PhaseRollingBack); err != nil {
				return st, err
			}
		}
		if err := e.sleep(ctx, wait); err != nil {
			return st, fmt.Errorf("%s: stopped between two steps: %w", target, err)
		}
	}
}

// retrier paces the retries of one driver loop within the error budget: the backoff is
// client-go's per-item exponential rate limiter, as the controllers' work queues use, for the
// one item the loop drives.
type retrier struct {
	e          *Engine
	target     workload.Ref
	budget     time.Duration
	errorsFrom time.Time
	backoff    workqueue.TypedRateLimiter[workload.Ref]
	// rolloutID is the rollout driven, once known, for the log.
	rolloutID string
}

func (e *Driver) retrier(target workload.Ref) *retrier {
	budget := e.ErrorBudget
	if budget <= 0 {
		budget = DefaultErrorBudget
	}
	return &retrier{e: e.Engine, target: target, budget: budget,
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[workload.Ref](firstBackoff, maxBackoff)}
}

// succeeded starts the budget and the backoff afresh.
func (r *retrier) succeeded() {
	r.errorsFrom = time.Time{}
	r.backoff.Forget(r.target)
}

// failed returns how long to wait before trying again after err, or the error to return: err
// itself when no retry fixes it, an *APIUnavailableError once errors outlasted the budget.
func (r *retrier) failed(err error, rollingBack bool) (time.Duration, error) {
	if !OutcomeOf(Status{}, err).Transient() {
		return 0, err
	}
	now := r.e.now()
	if r.errorsFrom.IsZero() {
		r.errorsFrom = now
	}
	if now.Sub(r.errorsFrom) > r.budget {
		return 0, &APIUnavailableError{Target: r.target, For: r.budget, RollingBack: rollingBack, Err: err}
	}
	wait := r.backoff.When(r.target)
	r.e.logFor(r.target, r.rolloutID).Warn("retrying", "err", err, "in", wait.String())
	return wait, nil
}

// sleep waits d, or until ctx is done.
func (e *Driver) sleep(ctx context.Context, d time.Duration) error {
	if e.wait != nil {
		return e.wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	changes := e.Changes
	if d <= changeDebounce {
		changes = nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	case <-changes:
		// The pods changed: wait out the debounce (part of it may have passed), then step.
		t.Reset(changeDebounce)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
}
