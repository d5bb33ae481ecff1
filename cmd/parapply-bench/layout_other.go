//go:build !linux

package main

import "errors"

// errNoAffinity: the separate layout pins processes to CPUs with Linux's
// sched_setaffinity.
var errNoAffinity = errors.New("the separate layout needs Linux (it pins processes to CPUs); use --layout shared")

func checkSeparate() error { return errNoAffinity }

func separate(pubPID, subPID int) (restore func(), cpus string, err error) {
	return nil, "", errNoAffinity
}
