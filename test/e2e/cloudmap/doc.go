// Package cloudmap runs mcsd end to end with the AWS Cloud Map registry
// backend, against a local Cloud Map emulator (moto), on two real clusters.
package cloudmap
