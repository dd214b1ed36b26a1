# /etc/profile.d/raygate-autoscaler.sh in the autoscaler image (deploy/ray-autoscaler/Dockerfile).
#
# KubeRay (1.4 to 1.6 at least) starts the autoscaler container as
#   /bin/bash -lc -- "ray kuberay-autoscaler --cluster-name ... --cluster-namespace ..."
# and lets a RayCluster change only its image and environment (autoscalerOptions has no
# command). A login shell reads /etc/profile.d/, so this function turns that command into
# raygate-autoscaler, with the same arguments, when RAYGATE_URL is set; without it the
# stock autoscaler runs. Every other `ray` command is Ray's own.
ray() {
  if [ "${1-}" = "kuberay-autoscaler" ] && [ -n "${RAYGATE_URL-}" ]; then
    shift
    exec raygate-autoscaler "$@"
  fi
  command ray "$@"
}
