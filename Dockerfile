# raygate's image (ghcr.io/raygate-dev/raygate; `make image` where Docker exists, and
# .github/workflows/release.yml for amd64 and arm64 on a tag): slim, non-root, and
# everything installed from requirements/*.txt with pip's --require-hashes.
#
# The base image. PYTHON_VERSION is also the Python requirements/lock.py resolves for.
# A release builds from it by digest: `make pin-base-images` (requirements/base_image.py
# pin; needs Docker and a registry) reads the tag's image index, checks it holds amd64 and
# arm64, and writes python:<tag>@sha256:<digest> below (commit it). The release workflow
# runs the same on every tag, so a release is built from one digest even before anyone
# pinned here, and records it (image label org.opencontainers.image.base.name, release
# notes). Not pinned in the repository yet: its machines reach no registry, and no digest
# is written from memory. On every update of the tag: pin again (and rerun
# requirements/lock.py if the minor version changed).
ARG PYTHON_VERSION=3.11.7
ARG PYTHON_IMAGE=python:${PYTHON_VERSION}-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY requirements/build.txt requirements/runtime.txt /requirements/
# The build backend from the lock, then raygate's wheel alone (its dependencies come from
# runtime.txt in the final stage, by hash).
RUN python -m pip install --no-cache-dir --require-hashes -r /requirements/build.txt
COPY pyproject.toml README.md LICENSE ./
COPY raygate ./raygate
RUN python -m pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
COPY --from=build /requirements/runtime.txt /requirements/runtime.txt
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --require-hashes -r /requirements/runtime.txt \
 && python -m pip install --no-cache-dir --no-deps /wheels/*.whl \
 && rm -rf /wheels /requirements \
 && raygate --help > /dev/null
# 65532: the conventional "nonroot" user; the Deployment sets runAsNonRoot and a
# read-only root filesystem, so nothing is written outside /tmp (an emptyDir there).
USER 65532:65532
EXPOSE 8888 9090
ENTRYPOINT ["raygate"]
CMD ["serve", "--demo"]
