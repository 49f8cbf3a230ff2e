//go:build !linux

package longpath

import (
	"context"
	"errors"
)

// Run needs Linux network namespaces.
func Run(context.Context, Options) (*Results, error) {
	return nil, errors.New("longpath needs Linux network namespaces")
}
