package main

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestExitWithParent(t *testing.T) {
	var ppid atomic.Int64
	ppid.Store(42)
	exited := make(chan struct{})
	go exitWithParent(42, func() int { return int(ppid.Load()) }, time.Millisecond, func() { close(exited) })
	select {
	case <-exited:
		t.Fatal("exited while the parent was still there")
	case <-time.After(20 * time.Millisecond):
	}
	ppid.Store(1) // re-parented to init: the controller is gone
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit once the parent was gone")
	}
}
