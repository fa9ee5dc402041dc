# syntax=docker/dockerfile:1
# The synod server image: `docker build -t synod .` from the repository root.
#
# Stage 1 builds the release binary with the Rust toolchain (protoc comes from a crate, so no
# system packages are needed); stage 2 is Debian slim with that one binary, run as a non-root
# user. The configuration is mounted at /etc/synod/synod.toml (the Helm chart writes it from a
# ConfigMap; deploy/config/ has examples), certificates under /etc/synod/tls, and the data
# lives in the /var/lib/synod volume. See docs/production.md.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY proto ./proto
# The registry and target caches survive between builds (BuildKit); the binary is copied out
# of the cached target directory because a cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p synod \
    && install -D -m 0755 target/release/synod /out/synod

FROM debian:${DEBIAN_RELEASE}-slim
ARG SYNOD_UID=10001
# A fixed numeric id, so that Kubernetes' runAsNonRoot can check it and volume ownership
# (fsGroup) matches.
RUN groupadd --system --gid "${SYNOD_UID}" synod \
    && useradd --system --uid "${SYNOD_UID}" --gid synod --home-dir /var/lib/synod \
       --no-create-home --shell /usr/sbin/nologin synod \
    && install -d -o synod -g synod -m 0750 /var/lib/synod \
    && install -d -m 0755 /etc/synod
COPY --from=build /out/synod /usr/local/bin/synod
USER 10001:10001
WORKDIR /var/lib/synod
VOLUME ["/var/lib/synod"]
# ZooKeeper clients, ZooKeeper clients over TLS, peers, admin HTTP(S), SconeKV gRPC.
EXPOSE 2181 2281 2888 9181 2479
# synod handles SIGTERM itself (answers pending requests, syncs the log, exits 0).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/synod"]
CMD ["server", "--config", "/etc/synod/synod.toml"]
