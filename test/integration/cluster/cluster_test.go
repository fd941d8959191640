package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func TestOnFreePortsRetriesOnlyWhenAPortWasTaken(t *testing.T) {
	portTaken := fmt.Errorf("waiting for etcd /health: %w", errPortInUse)
	otherExit := fmt.Errorf("waiting for etcd /health: %w", errExited)
	tests := []struct {
		name      string
		results   []error // what each start returns, in turn
		wantCalls int
		wantErr   error // nil: success
	}{
		{"first start succeeds", []error{nil}, 1, nil},
		{"port taken once", []error{portTaken, nil}, 2, nil},
		{"port taken twice", []error{portTaken, portTaken, nil}, 3, nil},
		{"port taken every time", []error{portTaken, portTaken, portTaken, nil}, startAttempts, errPortInUse},
		{"other exit is not retried", []error{otherExit, nil}, 1, errExited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := 20000
			c := &Cluster{log: slog.New(slog.NewTextHandler(t.Output(), nil))}
			c.pickPorts = func(n int) ([]int, error) {
				var ports []int
				for range n {
					next++
					ports = append(ports, next)
				}
				return ports, nil
			}
			var got [][]int
			err := c.onFreePorts("etcd", 2, func(ports []int) error {
				got = append(got, ports)
				return tt.results[len(got)-1]
			})
			if len(got) != tt.wantCalls {
				t.Fatalf("start called %d times, want %d", len(got), tt.wantCalls)
			}
			for i := 1; i < len(got); i++ {
				if slices.Equal(got[i], got[i-1]) {
					t.Errorf("attempt %d reused the ports %v of the attempt before", i+1, got[i])
				}
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("onFreePorts: %v, want success", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("onFreePorts: %v, want an error wrapping %q", err, tt.wantErr)
			case tt.wantErr == errExited && errors.Is(err, errPortInUse):
				t.Fatalf("onFreePorts: %v, want an exit that is not about a port", err)
			}
		})
	}
}

// TestEtcdStartsOnNewPortsWhenOneIsTaken gives a real etcd a port another listener holds, as
// happens when a port is taken between freePorts and the bind.
func TestEtcdStartsOnNewPortsWhenOneIsTaken(t *testing.T) {
	tests := []struct {
		name      string
		port      int  // index of the taken port: 0 client, 1 peer
		takenFor  int  // how many picks hand out the taken port
		hangs     bool // the holder accepts and never answers: the health check must time out
		wantPicks int
		wantUp    bool
	}{
		{"client port taken once by a holder that never answers", 0, 1, true, 2, true},
		{"peer port taken once", 1, 1, false, 2, true},
		{"client port taken every time", 0, startAttempts, false, startAttempts, false},
	}
	binDir, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("holding a port: %v", err)
			}
			t.Cleanup(func() { l.Close() })
			if !tt.hangs {
				go func() {
					for {
						conn, err := l.Accept()
						if err != nil {
							return // closed by the cleanup
						}
						conn.Close()
					}
				}()
			}
			taken := l.Addr().(*net.TCPAddr).Port

			c := &Cluster{Dir: t.TempDir(), opts: Options{BinDir: binDir}, log: slog.New(slog.NewTextHandler(t.Output(), nil))}
			t.Cleanup(func() {
				if err := c.Stop(); err != nil {
					t.Errorf("stopping: %v", err)
				}
			})
			picks := 0
			c.pickPorts = func(n int) ([]int, error) {
				picks++
				ports, err := freePorts(n)
				if err == nil && picks <= tt.takenFor {
					ports[tt.port] = taken
				}
				return ports, err
			}
			err = c.onFreePorts("etcd", 2, func(ports []int) error { return c.startEtcd(ports[0], ports[1]) })
			if picks != tt.wantPicks {
				t.Errorf("ports picked %d times, want %d", picks, tt.wantPicks)
			}
			if tt.wantUp {
				if err != nil {
					t.Fatalf("etcd did not start: %v", err)
				}
				if len(c.procs) != 1 || c.procs[0].name != "etcd" {
					t.Errorf("processes after the retry: %d, want only the running etcd", len(c.procs))
				}
				return
			}
			if !errors.Is(err, errPortInUse) {
				t.Fatalf("start error %v, want one wrapping %q", err, errPortInUse)
			}
			if len(c.procs) != 0 {
				t.Errorf("%d processes kept after every attempt failed, want none", len(c.procs))
			}
		})
	}
}

func TestWaitControllerManager(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}
	tests := []struct {
		name    string
		objects []runtime.Object
		bin     string // stands in for kube-controller-manager
		args    []string
		wantErr string // empty: ready
	}{
		{"default ServiceAccount written", []runtime.Object{sa}, "sleep", []string{"30"}, ""},
		{"controller manager exited first", nil, "false", nil, "waiting for kube-controller-manager (its serviceaccount-controller creating ServiceAccount default/default): process exited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, err := exec.LookPath(tt.bin)
			if err != nil {
				t.Skipf("no %s to stand in for the controller manager: %v", tt.bin, err)
			}
			p, err := startProcess(t.TempDir(), "kube-controller-manager", bin, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.stop(5 * time.Second) })
			c := &Cluster{Client: fake.NewClientset(tt.objects...), log: slog.New(slog.NewTextHandler(t.Output(), nil))}
			err = c.waitControllerManager(context.Background(), p)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("waitControllerManager: %v, want ready", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, errExited) {
				t.Fatalf("waitControllerManager: %v, want an error wrapping %q containing %q", err, errExited, tt.wantErr)
			}
		})
	}
}
