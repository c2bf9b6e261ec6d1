package controller

import (
	"sync/atomic"

	"github.com/go-logr/logr"
)

// withVerbosity returns a logger that also writes the messages of levels up
// to verbosity, whatever the process-wide -v says: spec.logVerbosity raises
// the log level of one cluster's loop. Such messages are written at level 0,
// which every sink lets through. verbosity may change while it is in use.
func withVerbosity(logger logr.Logger, verbosity *atomic.Int32) logr.Logger {
	sink := logger.GetSink()
	if sink == nil {
		return logger
	}
	// The wrapper's methods are one more frame between the caller and the sink.
	if withDepth, ok := sink.(logr.CallDepthLogSink); ok {
		sink = withDepth.WithCallDepth(1)
	}
	return logr.New(&verbositySink{sink: sink, verbosity: verbosity})
}

// verbositySink lets levels up to verbosity through to the sink it wraps.
type verbositySink struct {
	sink      logr.LogSink
	verbosity *atomic.Int32
}

var _ logr.CallDepthLogSink = &verbositySink{}

func (s *verbositySink) Init(info logr.RuntimeInfo) {
	// The sink was initialised when its own logger was created.
}

func (s *verbositySink) Enabled(level int) bool {
	return level <= int(s.verbosity.Load()) || s.sink.Enabled(level)
}

func (s *verbositySink) Info(level int, msg string, keysAndValues ...any) {
	if level <= int(s.verbosity.Load()) {
		level = 0
	}
	s.sink.Info(level, msg, keysAndValues...)
}

func (s *verbositySink) Error(err error, msg string, keysAndValues ...any) {
	s.sink.Error(err, msg, keysAndValues...)
}

func (s *verbositySink) WithValues(keysAndValues ...any) logr.LogSink {
	return &verbositySink{sink: s.sink.WithValues(keysAndValues...), verbosity: s.verbosity}
}

func (s *verbositySink) WithName(name string) logr.LogSink {
	return &verbositySink{sink: s.sink.WithName(name), verbosity: s.verbosity}
}

func (s *verbositySink) WithCallDepth(depth int) logr.LogSink {
	withDepth, ok := s.sink.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &verbositySink{sink: withDepth.WithCallDepth(depth), verbosity: s.verbosity}
}
