module github.com/glint-cluster/glint

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	google.golang.org/protobuf v1.36.13-0.20261016172727-e9ee2a76ab8e
)

require pgregory.net/rapid v1.3.0

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
