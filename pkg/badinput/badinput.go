// Package badinput is the one error type for bad input, shared by pkg/workload and pkg/rollout:
// a rollout that cannot run as asked, with nothing written, and the choices a driver can offer
// besides fixing the input. One type, so that a driver tells bad input from every other error
// with one errors.As, whichever package found it.
package badinput

// InvalidError is bad input: the rollout cannot run as asked, and nothing was written.
type InvalidError struct {
	// Msg says what is wrong and, when Fix is empty, what to do.
	Msg string
	// Fix names a choice the caller has besides fixing the input, for each driver to phrase
	// its own way (a flag, a field); Error says it in neutral words.
	Fix Fix
}

func (e *InvalidError) Error() string { return e.Msg + e.Fix.Choice() }

// Fix names what a person can do about bad input besides what the message says: a choice that
// lets it through, a setting it lacks, a repair. A driver maps it to its own flag, field or
// command, so the messages name none.
type Fix string

// Fixes.
const (
	// FixAllowUnready: start although some pods are not Ready.
	FixAllowUnready Fix = "AllowUnready"
	// FixSupersede: replace the holder's rollout in flight to other images with this one.
	FixSupersede Fix = "Supersede"
	// FixAllowOwned: update label-selected pods that a controller owns anyway.
	FixAllowOwned Fix = "AllowOwned"
	// FixPrometheusAddress: give the address of the Prometheus the analysis queries.
	FixPrometheusAddress Fix = "PrometheusAddress"
	// FixStateAnnotation: a pod's state annotation cannot be read; it must be restored or
	// removed before anything is written.
	FixStateAnnotation Fix = "StateAnnotation"
	// FixPinNever: pods already run a target tag that cannot be resolved; turning digest pinning
	// off judges them by the tag alone.
	FixPinNever Fix = "PinNever"
	// FixTakeOver: another holder's rollout holds the workload; once that holder no longer
	// exists, taking the lock over lets this caller roll it back or supersede it.
	FixTakeOver Fix = "TakeOver"
)

// Choice says the choice in words that name no driver, as the end of an error message.
func (f Fix) Choice() string {
	switch f {
	case FixAllowUnready:
		return ", or allow the rollout to start with pods that are not Ready"
	case FixSupersede:
		return "; supersede it with this rollout, or roll it back first"
	case FixAllowOwned:
		return ", or allow pods a controller owns to be updated anyway"
	case FixPrometheusAddress:
		return ": give prometheus.address in the analysis config"
	case FixStateAnnotation:
		return "; restore it or remove it, then run again. Nothing was changed"
	case FixPinNever:
		return ", or turn digest pinning off (never) to take the pods on the tag as done, whatever content it names"
	case FixTakeOver:
		return "; if that holder no longer exists, take the rollout over to roll it back or replace it"
	}
	return ""
}
