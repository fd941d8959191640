// Command kubeletsim runs the kubelet simulator as a process against any apiserver: it
// registers nodes, binds pods and drives their status until it gets SIGTERM or SIGINT.
package main
