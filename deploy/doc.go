// Package deploy has no code of its own: its tests check Glint's deployment
// files — Dockerfile, docker-compose.yml and .env, deploy/otel/*.yaml,
// deploy/prometheus and deploy/k8s — against each other, against promtool,
// and by running them without Docker on loopback ports (the glint commands
// compose runs, the collector and Jaeger configs in the Jaeger binary, the
// Prometheus config in Prometheus).
package deploy
