package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	// Go's fallback CA roots: used for HTTPS (the Cloud Map backend, an
	// etcds:// registry without --registry-ca) where the machine has none,
	// as in mcsd's image, which holds no certificate files.
	_ "golang.org/x/crypto/x509roots/fallback"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mcsd:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := newControllerCommand()
	root.AddCommand(newRegistryCommand())
	root.AddCommand(newStatusCommand())
	return root
}
