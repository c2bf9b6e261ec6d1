package localstack

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

const freePortsChildEnv = "LOCALSTACK_FREE_PORTS_CHILD"

// freePortsPerProcess is enough that ports the kernel hands out at random
// would repeat (a few expected collisions out of the range's 12,768).
const freePortsPerProcess = 300

// TestFreePortIsNeverHandedOutTwice runs two processes picking ports, as
// make test runs two stacks side by side: no port goes twice, within a
// process or across the two, and none is in the kernel's ephemeral range.
func TestFreePortIsNeverHandedOutTwice(t *testing.T) {
	if os.Getenv(freePortsChildEnv) != "" {
		for range freePortsPerProcess {
			port, err := FreePort()
			if err != nil {
				t.Fatal(err)
			}
			os.Stdout.WriteString(strconv.Itoa(port) + "\n")
		}
		// Holding the reservations while the parent picks its own.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		return
	}

	child := exec.Command(os.Args[0], "-test.run=^TestFreePortIsNeverHandedOutTwice$")
	child.Env = append(os.Environ(), freePortsChildEnv+"=1")
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = child.Wait()
	}()

	owner := map[int]string{}
	take := func(who string, port int) {
		t.Helper()
		if port < firstFreePort || port > lastFreePort {
			t.Errorf("%s got port %d, outside %d-%d", who, port, firstFreePort, lastFreePort)
		}
		if other, taken := owner[port]; taken {
			t.Errorf("port %d went to %s, and to %s before", port, who, other)
		}
		owner[port] = who
	}
	lines := bufio.NewScanner(stdout)
	for range freePortsPerProcess {
		if !lines.Scan() {
			t.Fatalf("the child process stopped before printing %d ports: %v", freePortsPerProcess, lines.Err())
		}
		port, err := strconv.Atoi(lines.Text())
		if err != nil {
			t.Fatalf("the child process printed %q", lines.Text())
		}
		take("the other process", port)
	}
	for range freePortsPerProcess {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		take("this process", port)
	}
}
