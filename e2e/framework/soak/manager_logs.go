package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// What a manager logs (internal/controller) that the checks read: its
// engines of a ClusterAutoscaler started and stopped, the Cluster's Lease
// taken and given up, and panics, even recovered ones.
const (
	engineStartedLog = `"Started the autoscaling engine"`
	engineStoppedLog = `"Stopped the autoscaling engine"`
	leaseTakenLog    = "Took the Lease of the Cluster"
	leaseGivenUpLog  = "Gave up the Lease of the Cluster"
)

// logEventKind is a line of a manager's log that the checks read.
type logEventKind string

const (
	engineStarted logEventKind = "engine started"
	engineStopped logEventKind = "engine stopped"
	leaseTaken    logEventKind = "Lease taken"
	leaseGivenUp  logEventKind = "Lease given up"
	panicked      logEventKind = "panic"
)

// logEvent is one such line, and when it was logged.
type logEvent struct {
	At   time.Time
	Kind logEventKind
	Line string
}

// Managers are every manager process the soak ran: the suite's, those
// started again in its place, and the second ones, with how each ended,
// and what their logs said so far of the soak's Cluster. The checks read
// them; its methods are safe for concurrent use.
type Managers struct {
	// ClusterAutoscaler is the Active one, whose engines the logs tell.
	ClusterAutoscaler types.NamespacedName
	// Cluster is the name of the Cluster, whose Lease the logs tell.
	Cluster string

	mu   sync.Mutex
	runs []*managerRun
}

// managerRun is one manager process, as the soak ran it.
type managerRun struct {
	process *localstack.Process
	// ended is when the soak killed or stopped it; zero while it runs.
	ended time.Time
	// killed says it was killed (SIGKILL): its engines stopped at ended
	// without a word in its log.
	killed bool
	// read is how much of its log was read, up to the last full line.
	read   int64
	events []logEvent
	// stackLines is how many more lines go with the last event, a panic.
	stackLines int
}

// Add has the checks follow a manager from now on.
func (m *Managers) Add(p *localstack.Process) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs = append(m.runs, &managerRun{process: p})
}

// Ended records that the soak killed (SIGKILL) or stopped the manager at
// a time; a manager that exits otherwise is a violation.
func (m *Managers) Ended(p *localstack.Process, at time.Time, killed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, run := range m.runs {
		if run.process == p && run.ended.IsZero() {
			run.ended, run.killed = at, killed
		}
	}
}

// EndedBySoak says whether the soak killed or stopped the manager.
func (m *Managers) EndedBySoak(p *localstack.Process) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, run := range m.runs {
		if run.process == p && !run.ended.IsZero() {
			return true
		}
	}
	return false
}

// managerHistory is what the checks know of one manager.
type managerHistory struct {
	Name   string
	Events []logEvent
	// Ended is when the soak killed or stopped it, zero while it runs;
	// Killed says it was killed.
	Ended  time.Time
	Killed bool
	// Exited says the process has exited.
	Exited bool
}

// histories reads what the managers logged since the last call and
// returns what each logged so far.
func (m *Managers) histories() ([]managerHistory, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lease := controller.ClusterLeaseName(m.Cluster)
	of := fmt.Sprintf("ClusterAutoscaler=%q", m.ClusterAutoscaler.String())
	histories := make([]managerHistory, 0, len(m.runs))
	for _, run := range m.runs {
		if err := run.readLog(of, lease); err != nil {
			return nil, err
		}
		exited := false
		select {
		case <-run.process.Exited():
			exited = true
		default:
		}
		histories = append(histories, managerHistory{
			Name: run.process.Name(), Events: run.events, Ended: run.ended, Killed: run.killed, Exited: exited,
		})
	}
	return histories, nil
}

// readLog reads the lines of the manager's log written since the last
// call that tell of the ClusterAutoscaler's engines (of), of the Cluster's
// Lease, or of a panic.
func (r *managerRun) readLog(of, lease string) error {
	f, err := os.Open(r.process.LogPath())
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(r.read, io.SeekStart); err != nil {
		return err
	}
	reader := bufio.NewReader(f)
	for {
		line, err := reader.ReadBytes('\n')
		if err == io.EOF {
			// A line being written is read whole next time.
			return nil
		}
		if err != nil {
			return err
		}
		r.read += int64(len(line))
		r.consume(string(bytes.TrimRight(line, "\n")), of, lease)
	}
}

// maxStackLines is how many lines after a panic's first one are kept
// with it: its stack, which the violation shows (the stack's logs are
// gone once the soak ends).
const maxStackLines = 80

// consume takes one line of the manager's log: an event the checks read,
// or a line of the stack of the last panic.
func (r *managerRun) consume(line, of, lease string) {
	if r.stackLines > 0 {
		panicEvent := &r.events[len(r.events)-1]
		panicEvent.Line += "\n" + line
		r.stackLines--
		// klog ends a multi-line value with a line of its own.
		if strings.TrimSpace(line) == ">" {
			r.stackLines = 0
		}
		return
	}
	if event, ok := parseLogLine(line, of, lease); ok {
		r.events = append(r.events, event)
		if event.Kind == panicked {
			r.stackLines = maxStackLines
		}
	}
}

// parseLogLine tells the event a klog line of a manager's log is, if it
// is one the checks read.
func parseLogLine(line, of, lease string) (logEvent, bool) {
	var kind logEventKind
	switch {
	case strings.HasPrefix(line, "panic:") || strings.Contains(line, "Observed a panic"):
		kind = panicked
	case strings.Contains(line, engineStartedLog) && strings.Contains(line, of):
		kind = engineStarted
	case strings.Contains(line, engineStoppedLog) && strings.Contains(line, of):
		kind = engineStopped
	case strings.Contains(line, leaseTakenLog) && strings.Contains(line, lease):
		kind = leaseTaken
	case strings.Contains(line, leaseGivenUpLog) && strings.Contains(line, lease):
		kind = leaseGivenUp
	default:
		return logEvent{}, false
	}
	at, _ := klogTime(line, time.Now())
	return logEvent{At: at, Kind: kind, Line: line}, true
}

// klogTime is the time of a klog line ("I1207 04:01:09.123456 ..."), in
// the year of now: klog leaves the year out.
func klogTime(line string, now time.Time) (time.Time, bool) {
	if len(line) < len("I0102 15:04:05.000000") {
		return time.Time{}, false
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:len("I0102 15:04:05.000000")], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	at = at.AddDate(now.Year(), 0, 0)
	if at.After(now.Add(24 * time.Hour)) {
		// Logged last year, read after new year.
		at = at.AddDate(-1, 0, 0)
	}
	return at, true
}

// Violations are what the managers' logs broke so far (managerViolations):
// an engine started without the Lease, two engines of the
// ClusterAutoscaler at once, a panic or an unexpected exit.
func (m *Managers) Violations(now time.Time) ([]string, error) {
	histories, err := m.histories()
	if err != nil {
		return nil, err
	}
	return managerViolations(histories, now), nil
}

// Holder is the running manager whose log says it holds the Cluster's
// Lease: the last it said of the Lease is that it took it. Nil when none
// says so.
func (m *Managers) Holder() (*localstack.Process, error) {
	histories, err := m.histories()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, history := range histories {
		if !history.Exited && history.Ended.IsZero() && holdsLease(history.Events) {
			return m.runs[i].process, nil
		}
	}
	return nil, nil
}

// holdsLease says whether the last the events say of the Lease is that
// it was taken.
func holdsLease(events []logEvent) bool {
	for i := len(events) - 1; i >= 0; i-- {
		switch events[i].Kind {
		case leaseTaken:
			return true
		case leaseGivenUp:
			return false
		}
	}
	return false
}

// engineRun is when an engine of the Active ClusterAutoscaler ran in a
// manager; end is zero while it runs.
type engineRun struct {
	manager    string
	start, end time.Time
}

func (e engineRun) String() string {
	end := "still running"
	if !e.end.IsZero() {
		end = e.end.Format("15:04:05.000000")
	}
	return fmt.Sprintf("%s from %s to %s", e.manager, e.start.Format("15:04:05.000000"), end)
}

// leaseLogSlack is how long after an engine started its manager may log
// that it took the Lease: the elector tells of the new holder and of the
// leading in two goroutines, either first.
const leaseLogSlack = time.Second

// managerViolations are what the managers' logs break:
//   - an engine of the Active ClusterAutoscaler started in a manager that
//     did not hold the Cluster's Lease (by its log: the last it said of
//     the Lease before, or within leaseLogSlack after, is not that it
//     took it);
//   - engines of it running in two managers at once: from its start to
//     its stop, or to when the manager was killed, or, stopped, to when it
//     gave the Lease up (the engines stop first, unlogged), or to now;
//   - a manager that panicked, even recovering, or exited without the
//     soak killing or stopping it.
func managerViolations(histories []managerHistory, now time.Time) []string {
	var violations []string
	var runs []engineRun
	for _, history := range histories {
		var open *engineRun
		lastGivenUp := time.Time{}
		for i, event := range history.Events {
			switch event.Kind {
			case panicked:
				violations = append(violations, fmt.Sprintf("the manager %s panicked: %s", history.Name, event.Line))
			case engineStarted:
				if !leaseHeldAt(history.Events, i) {
					violations = append(violations, fmt.Sprintf("the manager %s started an engine of the Active ClusterAutoscaler at %s without holding the Cluster's Lease: %s",
						history.Name, event.At.Format("15:04:05.000000"), event.Line))
				}
				if open == nil {
					open = &engineRun{manager: history.Name, start: event.At}
				}
			case engineStopped:
				if open != nil {
					open.end = event.At
					runs = append(runs, *open)
					open = nil
				}
			case leaseGivenUp:
				lastGivenUp = event.At
			}
		}
		if history.Exited && history.Ended.IsZero() {
			violations = append(violations, fmt.Sprintf("the manager %s exited and the soak neither killed nor stopped it", history.Name))
		}
		if open == nil {
			continue
		}
		switch {
		case history.Killed:
			open.end = history.Ended
		case !history.Ended.IsZero() && lastGivenUp.After(open.start):
			open.end = lastGivenUp
		case !history.Ended.IsZero():
			open.end = history.Ended
		}
		runs = append(runs, *open)
	}
	for i, a := range runs {
		for _, b := range runs[i+1:] {
			if a.manager != b.manager && overlap(a, b, now) {
				violations = append(violations, fmt.Sprintf("two engines of the Active ClusterAutoscaler acted at once: in %s, and in %s", a, b))
			}
		}
	}
	return violations
}

// leaseHeldAt says whether the manager held the Lease when it logged the
// engine start events[i]: the last it said of the Lease before, or within
// leaseLogSlack after, is that it took it.
func leaseHeldAt(events []logEvent, i int) bool {
	held := holdsLease(events[:i])
	for _, event := range events[i+1:] {
		if event.At.Sub(events[i].At) > leaseLogSlack {
			break
		}
		if event.Kind == leaseTaken {
			held = true
		}
	}
	return held
}

func overlap(a, b engineRun, now time.Time) bool {
	end := func(r engineRun) time.Time {
		if r.end.IsZero() {
			return now
		}
		return r.end
	}
	return a.start.Before(end(b)) && b.start.Before(end(a))
}
