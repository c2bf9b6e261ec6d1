package localstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/pki"
)

// stopTimeout is how long a process has to exit after SIGTERM before it is
// killed.
const stopTimeout = 10 * time.Second

// Process is a component of the stack, or a program run against it with
// Stack.StartProcess, running as a child process with its output in a log
// file. Its methods are safe for concurrent use.
type Process struct {
	name    string
	binary  string
	args    []string
	env     []string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error
}

// startProcess starts binary with args; it keeps running until stopped,
// whatever happens to ctx.
func startProcess(ctx context.Context, logDir, name, binary string, args ...string) (*Process, error) {
	return startProcessWithEnv(ctx, logDir, name, binary, nil, args...)
}

// startProcessWithEnv is startProcess with env added to the launcher's
// environment (later entries win, as in exec.Cmd).
func startProcessWithEnv(ctx context.Context, logDir, name, binary string, env []string, args ...string) (*Process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group: a Ctrl-C in the terminal reaches only the
	// launcher, which then stops the components in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{
		name:    name,
		binary:  binary,
		args:    slices.Clone(args),
		env:     slices.Clone(env),
		cmd:     cmd,
		logPath: logPath,
		exited:  make(chan struct{}),
	}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	ctrl.LoggerFrom(ctx).Info("Started process", "name", name, "pid", cmd.Process.Pid, "log", logPath)
	return p, nil
}

// Name is the name the process was started with; its log is Name().log in
// the stack's log directory.
func (p *Process) Name() string { return p.name }

// Binary is the program the process runs.
func (p *Process) Binary() string { return p.binary }

// Args are the arguments of the process, without the binary; a copy.
func (p *Process) Args() []string { return slices.Clone(p.args) }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file the process writes its output to.
func (p *Process) LogPath() string { return p.logPath }

// Exited is closed once the process has exited and was reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (nil for exit status 0); only meaningful
// once Exited is closed, nil before.
func (p *Process) Err() error {
	select {
	case <-p.exited:
		return p.err
	default:
		return nil
	}
}

// Kill ends the process at once with SIGKILL, by its process id, as a crash
// or an OOM kill would, and returns once it has exited. A process that has
// already exited is left alone.
func (p *Process) Kill() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.exited
	return nil
}

// Stop ends the process by its id: SIGTERM, then SIGKILL after stopTimeout.
// It returns once the process has exited; a process that has already
// exited is left alone.
func (p *Process) Stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	return p.Kill()
}

// waitHealthy polls url until it answers 200, failing early when the process
// exits.
func (p *Process) waitHealthy(ctx context.Context, client *http.Client, url string) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("%s exited: %w; see %s", p.name, p.err, p.logPath)
		default:
		}
		lastErr = probe(ctx, client, url)
		return lastErr == nil, nil
	})
	switch {
	case err != nil && lastErr != nil:
		return fmt.Errorf("waiting for %s to be healthy (last error: %w, log %s): %w", p.name, lastErr, p.logPath, err)
	case err != nil:
		return fmt.Errorf("waiting for %s to be healthy: %w", p.name, err)
	}
	return nil
}

// probe checks that url answers 200.
func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}

// httpsClient trusts the stack's CA and, when given, authenticates with a
// client certificate.
func httpsClient(caPEM []byte, clientCert *pki.KeyPair) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate")
	}
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		pair, err := tls.X509KeyPair(clientCert.Cert, clientCert.Key)
		if err != nil {
			return nil, err
		}
		tlsConfig.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}, nil
}

// httpClient talks to plain HTTP endpoints of the stack.
var httpClient = http.Client{Timeout: 5 * time.Second}

// Ports FreePort picks from: below the kernel's ephemeral range (32768-60999
// by default), so that no outgoing connection takes one between the pick and
// the component's bind.
const (
	firstFreePort = 20000
	lastFreePort  = 32767
)

// reservedPorts holds the lock of every port FreePort handed out, for the
// life of the process.
var reservedPorts struct {
	sync.Mutex
	locks []*os.File
}

// FreePort returns a port of 127.0.0.1 nobody listens on right now, and that
// no FreePort on this machine returns again while this process lives: make
// test starts two stacks side by side, and a port picked by one and not yet
// bound by its component must not go to the other. A port is reserved by an
// flock on a file of its number in a shared directory, which the kernel
// releases when the process ends, however it ends.
func FreePort() (int, error) {
	dir := filepath.Join(os.TempDir(), "localstack-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("reserving a port: %w", err)
	}
	for range 1000 {
		port := firstFreePort + rand.IntN(lastFreePort-firstFreePort+1)
		lock, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, fmt.Errorf("reserving a port: %w", err)
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			lock.Close()
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			lock.Close()
			continue
		}
		l.Close()
		reservedPorts.Lock()
		reservedPorts.locks = append(reservedPorts.locks, lock)
		reservedPorts.Unlock()
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d", firstFreePort, lastFreePort)
}
