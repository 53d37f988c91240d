// Package mototest runs a local moto server (the AWS mock, in server mode)
// for the Cloud Map backend's tests: it installs the pinned moto with
// hack/moto/ensure-venv.sh, starts hack/moto/cloudmap_server.py (moto_server
// with Cloud Map fidelity fixes) on a free 127.0.0.1 port, and stops it.
package mototest
