# kvroute container image: a static binary on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces go-zeromq/zmq4 with this patched copy (third_party/zmq4/KVROUTE.md).
COPY third_party/ third_party/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/kvroute ./cmd/kvroute

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kvroute /usr/local/bin/kvroute
EXPOSE 9002 9090
ENTRYPOINT ["/usr/local/bin/kvroute"]
CMD ["serve", "--config", "/etc/kvroute/kvroute.yaml"]
