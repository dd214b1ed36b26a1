//go:build tools

// Package tools names the commands this module builds, so go mod tidy keeps
// its dependencies.
package tools

import (
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/scheduler"
)
