// Package clirbac runs the command as a ServiceAccount bound only to config/cli's Role and
// checks that Role against the calls the command made, from the apiserver's audit log.
package clirbac
