package view

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// paneTimeout is how long the live view may take to show a change: it
// redraws at most once a second, and a watch event takes milliseconds.
const paneTimeout = 30 * time.Second

// TestLiveViewInTerminal runs the built plugin's top in a tmux pane against
// the test API server: it shows the node groups and their nodes' bars,
// follows changes of the status and of the explanation and the size of the
// terminal, and quits on q with the terminal as it was.
func TestLiveViewInTerminal(t *testing.T) {
	tmuxPath, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal("the live view's terminal test needs tmux on the PATH (e.g. apt-get install tmux)")
	}
	binary := buildPlugin(t)

	group := scalable.ID(scalable.KindMachineDeployment, "live", "live-md-0")
	f := plugintest.Fixture{
		CA: plugintest.NewClusterAutoscaler("live", "live", autoscalingv1alpha1.ClusterAutoscalerStatus{
			Conditions: plugintest.HealthyConditions(),
			NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{
				{ID: group, MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](5), TargetSize: 3, Registered: 3, Ready: 3},
			},
			Nodes: 3, ReadyNodes: 3, LastLoopTime: plugintest.At(0),
		}),
		Explanation: &autoscalingv1alpha1.Explanation{LoopTime: *plugintest.At(0), Nodes: []autoscalingv1alpha1.NodeExplanation{
			plugintest.Node("live-md-0-a", group, plugintest.Percent(72), autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNotUnderutilized), ""),
			plugintest.Node("live-md-0-b", group, plugintest.Percent(45), autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNotUnderutilized), ""),
			plugintest.Node("live-md-0-c", group, plugintest.Percent(0), autoscalingv1alpha1.NodeRemoving, "", ""),
		}},
	}
	f.Create(t)

	work := t.TempDir()
	tmux := tmuxServer{t: t, path: tmuxPath, socket: fmt.Sprintf("capi-autoscaler-plugin-test-%d", os.Getpid())}
	t.Cleanup(func() { _ = exec.Command(tmuxPath, "-L", tmux.socket, "kill-server").Run() })
	// After the view ends, the shell records how it ended and the
	// terminal's modes, and keeps the pane open.
	exitFile := filepath.Join(work, "exit")
	script := fmt.Sprintf("TZ=UTC %s top --kubeconfig %s -n live; echo exit=$? > %s.tmp; stty -a >> %s.tmp; mv %s.tmp %s; sleep 600",
		binary, plugintest.API.Kubeconfig, exitFile, exitFile, exitFile, exitFile)
	tmux.run("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "120", "-y", "40", "sh", "-c", script)

	pane := tmux.waitFor("the node group and its nodes", func(pane string) bool {
		return strings.Contains(pane, "live/live") &&
			strings.Contains(pane, "MachineDeployment live-md-0  min 1  target 3  ready 3  upcoming 0  max 5") &&
			hasBar(pane, "live-md-0-a", " 72%") && hasBar(pane, "live-md-0-b", " 45%") &&
			strings.Contains(pane, "being removed")
	})
	if header := strings.SplitN(pane, "\n", 2)[0]; utf8.RuneCountInString(header) != 120 || !strings.HasSuffix(header, "q: quit") {
		t.Errorf("the header does not span the 120 columns of the terminal: %q", header)
	}

	// The manager's next loop: a scale-up on its way, a node unneeded.
	ctx := context.Background()
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	if err := plugintest.API.Client.Get(ctx, client.ObjectKeyFromObject(f.CA), ca); err != nil {
		t.Fatal(err)
	}
	ca.Status.NodeGroups[0].TargetSize, ca.Status.NodeGroups[0].Upcoming = 4, 1
	if err := plugintest.API.Client.Status().Update(ctx, ca); err != nil {
		t.Fatal(err)
	}
	tmux.waitFor("the new target size", func(pane string) bool {
		return strings.Contains(pane, "target 4") && strings.Contains(pane, "+ 1 upcoming")
	})
	next := f.Explanation.DeepCopy()
	next.LoopTime = *plugintest.At(10 * time.Second)
	next.Nodes[1].UtilizationPercent, next.Nodes[1].UnneededSince = plugintest.Percent(12), plugintest.At(5*time.Second)
	f.Publish(t, next)
	tmux.waitFor("the unneeded node", func(pane string) bool {
		return hasBar(pane, "live-md-0-b", " 12%") && strings.Contains(pane, "unneeded since")
	})

	tmux.run("resize-window", "-t", "top", "-x", "90", "-y", "30")
	tmux.waitFor("the view redrawn for 90 columns", func(pane string) bool {
		header := strings.SplitN(pane, "\n", 2)[0]
		return utf8.RuneCountInString(header) == 90 && strings.HasSuffix(header, "q: quit")
	})

	tmux.run("send-keys", "-t", "top", "q")
	var exit []byte
	NewWithT(t).Eventually(func() (err error) {
		exit, err = os.ReadFile(exitFile)
		return err
	}, paneTimeout, 100*time.Millisecond).Should(Succeed(), func() string {
		return "top did not end after q; the pane shows:\n" + tmux.capture()
	})
	modes := string(exit)
	if !strings.HasPrefix(modes, "exit=0\n") {
		t.Errorf("top ended with %q, want exit=0", strings.SplitN(modes, "\n", 2)[0])
	}
	for _, mode := range []string{"icanon", "echo", "isig", "opost"} {
		if !slices.Contains(strings.Fields(modes), mode) {
			t.Errorf("the terminal was left without %s after top:\n%s", mode, modes)
		}
	}
	if screen := tmux.output("display-message", "-p", "-t", "top", "#{alternate_on} #{cursor_flag}"); screen != "0 1" {
		t.Errorf("after top, alternate screen and cursor flags are %q, want 0 1 (main screen, cursor shown)", screen)
	}
	if pane := tmux.capture(); strings.Contains(pane, "live-md-0") {
		t.Errorf("the view stays on the screen after top ended:\n%s", pane)
	}
}

// hasBar says whether the pane has a bar line of the node with the
// utilization.
func hasBar(pane, node, utilization string) bool {
	for _, line := range strings.Split(pane, "\n") {
		if strings.Contains(line, node) && strings.Contains(line, "█") && strings.Contains(line, utilization) {
			return true
		}
	}
	return false
}

// buildPlugin builds kubectl-capi_autoscaler for the test.
func buildPlugin(t *testing.T) string {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "kubectl-capi_autoscaler")
	build := exec.Command("go", "build", "-o", binary, "../../../cmd/kubectl-capi_autoscaler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	return binary
}

// tmuxServer is a tmux server of the test's own, on a socket of its own.
type tmuxServer struct {
	t            *testing.T
	path, socket string
}

func (s tmuxServer) output(args ...string) string {
	s.t.Helper()
	out, err := exec.Command(s.path, append([]string{"-L", s.socket}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimRight(string(out), "\n")
}

func (s tmuxServer) run(args ...string) {
	s.t.Helper()
	s.output(args...)
}

// capture is the text the pane shows.
func (s tmuxServer) capture() string {
	s.t.Helper()
	return s.output("capture-pane", "-p", "-t", "top")
}

// waitFor waits until the pane shows what shows says, and returns it.
func (s tmuxServer) waitFor(what string, shows func(pane string) bool) string {
	s.t.Helper()
	var pane string
	NewWithT(s.t).Eventually(func() bool {
		pane = s.capture()
		return shows(pane)
	}, paneTimeout, 200*time.Millisecond).Should(BeTrue(), func() string {
		return fmt.Sprintf("the live view did not show %s; it shows:\n%s", what, pane)
	})
	return pane
}

// TestTopWithoutTerminal prints the live view as plain frames when stdout
// is no terminal, until it is stopped.
func TestTopWithoutTerminal(t *testing.T) {
	healthyCluster("plain").Create(t)
	out := &syncBuffer{}
	cmd := cli.NewRootCommand(cli.Streams{Out: out, ErrOut: out}, func() time.Time { return plugintest.TestNow }, NewStatusCommand, NewExplainCommand, NewTopCommand)
	cmd.SetArgs([]string{"--kubeconfig", plugintest.API.Kubeconfig, "top", "-n", "plain"})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	NewWithT(t).Eventually(out.String, paneTimeout, 50*time.Millisecond).Should(ContainSubstring("prod-md-0-c"), "top printed no frame")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("top ended with %v", err)
	}
	frame := out.String()
	for _, want := range []string{"── 10:00:00 ──\n", "plain/prod   ✓ Ready", "prod-md-0-a  ████", "being removed"} {
		if !strings.Contains(frame, want) {
			t.Errorf("the frame lacks %q:\n%s", want, frame)
		}
	}
	if strings.Contains(frame, "\x1b") {
		t.Errorf("the frame printed for no terminal has escape codes:\n%q", frame)
	}
}

// syncBuffer is a buffer that a command writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
