// The event publisher's memory: what the loops told, in events and in the
// log, so that each thing is told when it appears or changes, not in every
// loop.

package autoscaler

import "time"

// told is what the loops told, by kind.
type told struct {
	// problems are the problems of node groups, by group ID and reason,
	// each told in an event.
	problems toldMessages
	// notTriggered are the NotTriggerScaleUp events of the pods that
	// triggered no scale-up, by UID, told again after
	// notTriggerScaleUpRepeat.
	notTriggered toldMessages
	// buffersError is the error of reading the capacity buffers, told in
	// the log.
	buffersError toldMessages
	// requestsError is the error of reading the provisioning requests,
	// told in the log.
	requestsError toldMessages
	// bufferSchedules are, by buffer key, whether the scheduled capacity
	// buffers hold their room (the event's reason) and the problems of
	// their schedules, each told in an event.
	bufferSchedules toldMessages
	// reseats are, by the UID of the pending pod, why pods that took its
	// room on its node move, told in an event on the pod.
	reseats toldMessages
	// minimumWindows are the windows of scheduled minimums in effect for
	// each group, by group ID and window name, told when they take effect
	// and when they end.
	minimumWindows map[string]string
}

func newTold() told {
	return told{notTriggered: toldMessages{repeat: notTriggerScaleUpRepeat}}
}

// notTriggerScaleUpRepeat is how often a pod that still triggers no
// scale-up, for the same reasons, is told again. Telling it in every loop
// cost a busy cluster an event write per pending pod per loop, for the
// same message.
const notTriggerScaleUpRepeat = 5 * time.Minute

// toldMessages are the messages told of one kind, by key, in rounds (a
// loop, or a read): a message is to be told when its key was not told in
// the last round, when it changed, or, with a repeat, once the repeat has
// passed since it was told.
type toldMessages struct {
	repeat time.Duration
	// last are the messages of the last round; round those of this one.
	last, round map[string]toldMessage
}

// toldMessage is a message told, and when.
type toldMessage struct {
	message string
	at      time.Time
}

// tell says whether message is to be told under key, and counts it as
// told in this round.
func (t *toldMessages) tell(key, message string, now time.Time) bool {
	last, toldBefore := t.last[key]
	tell := !toldBefore || last.message != message || (t.repeat > 0 && now.Sub(last.at) >= t.repeat)
	if tell {
		last = toldMessage{message: message, at: now}
	}
	if t.round == nil {
		t.round = map[string]toldMessage{}
	}
	t.round[key] = last
	return tell
}

// endRound forgets the messages the round did not tell again.
func (t *toldMessages) endRound() {
	t.last, t.round = t.round, nil
}

// tellOnly is tell for a kind that says one thing at a time, such as the
// error of a read: it is a round of its own.
func (t *toldMessages) tellOnly(message string, now time.Time) bool {
	defer t.endRound()
	return t.tell("", message, now)
}
