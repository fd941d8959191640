// Package inplace holds the tests (package inplace_test) of pkg/inplace against the real local
// control plane.
package inplace
