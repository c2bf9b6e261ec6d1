# The manager image. No base image can be pulled on every build machine, so
# the static binary is built on the host by `make docker-build` and copied
# into scratch; pass --build-arg BASE_IMAGE=gcr.io/distroless/static:nonroot
# (or any base) where one is available.
ARG BASE_IMAGE=scratch
FROM ${BASE_IMAGE}
COPY manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
