package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
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
