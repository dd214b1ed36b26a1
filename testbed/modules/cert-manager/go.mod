// cert-manager's CRDs (deploy/crds of its module), so that the manifests of the
// kube-scheduler-default setup, which ask cert-manager for the webhook's
// certificate, can be checked by the real API server. Nothing is built.
module raygate.dev/testbed/cert-manager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
