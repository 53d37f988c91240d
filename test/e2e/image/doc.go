// Package image installs mcsd as a user does, from the image make image
// builds: loaded into the testbed's image store and run by a real OCI
// runtime (runc), installed in c1 with kubectl apply -k of an overlay and in
// c2 with helm install, both against one etcd over TLS in which each cluster
// has its own identity. Both mcsd pods turn ready on their probes, the sample
// app (config/samples) exported in c1 is reached from a pod in c2 by its
// clusterset name, and the
// container is what the image promises: no shell, user 65532, a read-only
// root file system.
package image
