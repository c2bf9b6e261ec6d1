package clusterstate

import "time"

// BackoffOptions configure how long a group that failed to scale up is left
// out: Initial after the first failure, doubling with each further one up
// to Max, forgotten after ResetAfter without failures.
type BackoffOptions struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

type backoff struct {
	duration    time.Duration
	until       time.Time
	lastFailure time.Time
	reason      string
	message     string
}

// Backoff puts a group in backoff after a failure at now.
func (r *Registry) Backoff(groupID, reason, message string, now time.Time) time.Time {
	b, ok := r.backoffs[groupID]
	switch {
	case !ok || now.Sub(b.lastFailure) >= r.opts.Backoff.ResetAfter:
		b = &backoff{duration: r.opts.Backoff.Initial}
		r.backoffs[groupID] = b
	case now.Before(b.until):
		// A failure reported again while already backing off, e.g. the same
		// failed instance seen in the next loop, does not double the wait.
	default:
		b.duration = min(2*b.duration, r.opts.Backoff.Max)
	}
	b.lastFailure = now
	b.until = now.Add(b.duration)
	b.reason, b.message = reason, message
	return b.until
}

// BackoffStatus says until when and why a group is backing off; a zero
// time means it is not.
type BackoffStatus struct {
	Until   time.Time
	Reason  string
	Message string
}

// BackoffOf returns the backoff of a group at now.
func (r *Registry) BackoffOf(groupID string, now time.Time) BackoffStatus {
	b, ok := r.backoffs[groupID]
	if !ok {
		return BackoffStatus{}
	}
	if now.Sub(b.lastFailure) >= r.opts.Backoff.ResetAfter {
		delete(r.backoffs, groupID)
		return BackoffStatus{}
	}
	if !now.Before(b.until) {
		return BackoffStatus{}
	}
	return BackoffStatus{Until: b.until, Reason: b.reason, Message: b.message}
}
