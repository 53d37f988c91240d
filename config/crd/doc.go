// Package crd embeds the CustomResourceDefinitions mcsd installs, so that the
// binary and the tests install exactly what config/crd ships.
package crd
