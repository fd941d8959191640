package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// process is one child binary of the control plane, with its log and PID files in the cluster dir.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// logStart is where this run's lines begin in an appended log.
	logStart int64
	pidPath  string
	started  time.Time
	done     chan struct{}
	waitErr  error
}

// startProcess starts bin with args, logging to dir/<name>.log and recording its PID in
// dir/<name>.pid. The child is killed by the kernel if this process dies, so a crashed or
// killed test binary leaves nothing running.
func startProcess(dir, name, bin string, args ...string) (*process, error) {
	return startCommand(dir, name, exec.Command(bin, args...), false)
}

// startCommand starts cmd as startProcess does; cmd may set its own Dir and Env. With appendLog
// the log file is kept and appended to, for a process started again under the same name.
func startCommand(dir, name string, cmd *exec.Cmd, appendLog bool) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendLog {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logFile, err := os.OpenFile(logPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating log file for %s: %w", name, err)
	}
	var logStart int64
	if fi, err := logFile.Stat(); err == nil {
		logStart = fi.Size()
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, cmd.Path, err)
	}
	p := &process{
		name:     name,
		cmd:      cmd,
		logPath:  logPath,
		logStart: logStart,
		pidPath:  filepath.Join(dir, name+".pid"),
		started:  time.Now(),
		done:     make(chan struct{}),
	}
	if err := os.WriteFile(p.pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		logFile.Close()
		return nil, fmt.Errorf("writing PID file for %s: %w", name, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, with its exit error.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop asks the process to terminate, kills it after grace, and removes its PID file.
func (p *process) stop(grace time.Duration) error {
	defer os.Remove(p.pidPath)
	if done, _ := p.exited(); done {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	// The whole process group: some binaries start helpers of their own.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// log returns this run's part of the process log.
func (p *process) log() ([]byte, error) {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return nil, err
	}
	if p.logStart <= int64(len(data)) {
		data = data[p.logStart:]
	}
	return data, nil
}

// logTail returns the last lines of the process log, for error messages.
func (p *process) logTail() string {
	data, err := p.log()
	if err != nil {
		return ""
	}
	const max = 4000
	if len(data) > max {
		data = data[len(data)-max:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return string(data)
}

// freePorts returns n distinct free TCP ports on loopback.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logContains reports whether the process log holds s.
func (p *process) logContains(s string) bool {
	data, err := p.log()
	return err == nil && bytes.Contains(data, []byte(s))
}

// logLineContains reports whether one line of the process log holds every one of parts.
func (p *process) logLineContains(parts ...string) bool {
	data, err := p.log()
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		all := true
		for _, s := range parts {
			all = all && bytes.Contains(line, []byte(s))
		}
		if all {
			return true
		}
	}
	return false
}

// errExited is returned when a child process ends while the cluster waits for it.
var errExited = errors.New("process exited")

// errPortInUse is returned when a child process ends because a port it was given was taken.
var errPortInUse = fmt.Errorf("%w: address already in use", errExited)

// exitError tells why a process that ended early did: errPortInUse if its log says it could not
// bind its port, errExited otherwise.
func (p *process) exitError() error {
	if p.logContains("address already in use") {
		return errPortInUse
	}
	return errExited
}
