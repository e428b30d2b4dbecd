package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/glint-cluster/glint/internal/tooltest"
)

// k8sObject is the part of a Kubernetes object the tests read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		// Service
		ClusterIP string         `yaml:"clusterIP"`
		Selector  map[string]any `yaml:"selector"` // Service: labels; workloads: matchLabels

		Ports []struct {
			Port int `yaml:"port"`
		} `yaml:"ports"`
		// StatefulSet
		ServiceName              string `yaml:"serviceName"`
		Replicas                 int    `yaml:"replicas"`
		PublishNotReadyAddresses bool   `yaml:"publishNotReadyAddresses"`
		// Deployment, StatefulSet
		Template struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				SecurityContext struct {
					RunAsUser    *int  `yaml:"runAsUser"`
					RunAsNonRoot *bool `yaml:"runAsNonRoot"`
				} `yaml:"securityContext"`
				Containers []struct {
					Name  string   `yaml:"name"`
					Image string   `yaml:"image"`
					Args  []string `yaml:"args"`
					Env   []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"env"`
					Ports []struct {
						ContainerPort int `yaml:"containerPort"`
					} `yaml:"ports"`
					VolumeMounts   []volumeMount `yaml:"volumeMounts"`
					ReadinessProbe struct {
						HTTPGet struct {
							Path string `yaml:"path"`
						} `yaml:"httpGet"`
					} `yaml:"readinessProbe"`
				} `yaml:"containers"`
				Volumes []struct {
					Name   string `yaml:"name"`
					Secret *struct {
						SecretName  string `yaml:"secretName"`
						Items       []any  `yaml:"items"`
						DefaultMode *int   `yaml:"defaultMode"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
	// Kustomization
	Resources []string `yaml:"resources"`
	Patches   []struct {
		Patch string `yaml:"patch"`
	} `yaml:"patches"`
	SecretGenerator []struct {
		Name      string   `yaml:"name"`
		Namespace string   `yaml:"namespace"`
		Files     []string `yaml:"files"`
		Literals  []string `yaml:"literals"`
		Envs      []string `yaml:"envs"`
	} `yaml:"secretGenerator"`
	file string
}

type volumeMount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

func loadK8s(t testing.TB) []k8sObject { return loadK8sDir(t, "deploy/k8s") }

// loadK8sDir reads every object of the manifests in dir.
func loadK8sDir(t testing.TB, dir string) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(tooltest.Root(t), dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s/*.yaml (%v)", dir, err)
	}
	var objs []k8sObject
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", filepath.Base(path), err)
			}
			o.file = filepath.Base(path)
			objs = append(objs, o)
		}
	}
	return objs
}

func find(objs []k8sObject, kind, name string) *k8sObject {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

func TestK8sManifestsAreObjects(t *testing.T) {
	objs := loadK8s(t)
	var namespace string
	files := map[string]bool{}
	var kustomized []string
	for _, o := range objs {
		if o.Kind == "Kustomization" {
			kustomized = o.Resources
			continue
		}
		files[o.file] = true
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Errorf("%s: an object without apiVersion, kind or metadata.name: %+v", o.file, o.Metadata)
		}
		if o.Kind == "Namespace" {
			namespace = o.Metadata.Name
		}
	}
	if namespace == "" {
		t.Fatal("deploy/k8s has no Namespace")
	}
	for _, o := range objs {
		if o.Kind != "Namespace" && o.Kind != "Kustomization" && o.Metadata.Namespace != namespace {
			t.Errorf("%s: %s %s is in namespace %q, want %q", o.file, o.Kind, o.Metadata.Name, o.Metadata.Namespace, namespace)
		}
	}
	slices.Sort(kustomized)
	var want []string
	for f := range files {
		want = append(want, f)
	}
	slices.Sort(want)
	if !slices.Equal(kustomized, want) {
		t.Errorf("kustomization.yaml lists %v, deploy/k8s has %v", kustomized, want)
	}
	if k := find(objs, "Kustomization", ""); k != nil {
		for _, g := range k.SecretGenerator {
			if g.Namespace != namespace {
				t.Errorf("kustomization.yaml: secretGenerator %s is in namespace %q, want %q", g.Name, g.Namespace, namespace)
			}
		}
	}
}

// The Kubernetes manifests run what docker-compose.yml runs: the same
// image, commands, ports and work dir, as the same user as the Dockerfile.
func TestK8sAgreesWithCompose(t *testing.T) {
	objs := loadK8s(t)
	p := loadCompose(t, "demo")
	final := parseDockerfile(t)
	user, _, _ := strings.Cut(final[len(final)-1].last("USER"), ":")
	workDir := final[len(final)-1].last("WORKDIR")

	workloads := map[string]string{"master": "Deployment", "worker": "StatefulSet", "demo": "Deployment"}
	compose := map[string]string{"master": "master", "worker": "worker-1", "demo": "demo"}
	for name, kind := range workloads {
		o := find(objs, kind, name)
		if o == nil {
			t.Errorf("deploy/k8s has no %s %s", kind, name)
			continue
		}
		pod := o.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			t.Errorf("%s %s has %d containers, want 1", kind, name, len(pod.Containers))
			continue
		}
		c := pod.Containers[0]
		s := service(t, p, compose[name])
		if c.Image != s.Image {
			t.Errorf("%s %s runs %s, compose's %s runs %s", kind, name, c.Image, s.Name, s.Image)
		}
		if sc := pod.SecurityContext; sc.RunAsUser == nil || strconv.Itoa(*sc.RunAsUser) != user || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s %s: pod securityContext %+v, want runAsNonRoot and runAsUser %s (the Dockerfile's USER)", kind, name, sc, user)
		}
		cmd := []string(s.Command)
		if len(c.Args) == 0 || c.Args[0] != cmd[0] {
			t.Errorf("%s %s runs glint %v, compose's %s runs glint %v", kind, name, c.Args, s.Name, cmd)
			continue
		}
		kf, kpos := flags(c.Args[1:])
		cf, cpos := flags(cmd[1:])
		if !slices.Equal(kpos, cpos) {
			t.Errorf("%s %s: arguments %v, compose's %s: %v", kind, name, kpos, s.Name, cpos)
		}
		for flag, v := range cf {
			if flag == "--host" {
				continue // a DNS name of the cluster's, checked below
			}
			if kf[flag] != v {
				t.Errorf("%s %s: %s %q, compose's %s: %q", kind, name, flag, kf[flag], s.Name, v)
			}
		}
		// --allowed-host, k8s's alone, adds the Service name clients call the
		// master by, which compose's --host already is.
		for flag := range kf {
			if _, ok := cf[flag]; !ok && flag != "--allowed-host" {
				t.Errorf("%s %s sets %s, compose's %s does not", kind, name, flag, s.Name)
			}
		}
		listen, ok := kf["--listen"]
		if !ok {
			listen = glintDefaultListen[c.Args[0]]
		}
		if listen != "" {
			a, _ := parseAddr(listen)
			if len(c.Ports) != 1 || c.Ports[0].ContainerPort != a.port {
				t.Errorf("%s %s: container ports %+v, it listens on %d", kind, name, c.Ports, a.port)
			}
			ann := o.Spec.Template.Metadata.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(a.port) || ann["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s %s: pod annotations %v, want prometheus.io/scrape \"true\", port %d, path /metrics", kind, name, ann, a.port)
			}
		}
		// The token: where compose's service has it, from the cluster
		// token's Secret.
		var token string
		for _, e := range c.Env {
			if e.Name == "GLINT_TOKEN_FILE" {
				token = e.Value
			}
		}
		if want := tokenFile(s); token != want || want == "" {
			t.Errorf("%s %s: GLINT_TOKEN_FILE %q, compose's %s reads its token from %q", kind, name, token, s.Name, want)
		} else if err := clusterTokenMounted(t, objs, o, token); err != nil {
			t.Errorf("%s %s: GLINT_TOKEN_FILE %s: %v", kind, name, token, err)
		}
		if wd, ok := kf["--work-dir"]; ok {
			if wd != workDir || !slices.ContainsFunc(c.VolumeMounts, func(m volumeMount) bool { return m.MountPath == wd }) {
				t.Errorf("%s %s: --work-dir %s, want the image's %s with a volume mounted there", kind, name, wd, workDir)
			}
		}
	}

	// Workers and drivers reach the master at --master's host: a Service.
	master := find(objs, "Service", "master")
	if master == nil || len(master.Spec.Ports) != 1 || master.Spec.Ports[0].Port != 7077 {
		t.Errorf("no Service master on port 7077: %+v", master)
	} else if d := find(objs, "Deployment", "master"); d != nil && !subset(master.Spec.Selector, d.Spec.Template.Metadata.Labels) {
		t.Errorf("Service master selects %v, the master's pods are labelled %v", master.Spec.Selector, d.Spec.Template.Metadata.Labels)
	}

	// Each worker's --host is its DNS name under the StatefulSet's headless Service.
	if sts := find(objs, "StatefulSet", "worker"); sts != nil {
		svc := find(objs, "Service", sts.Spec.ServiceName)
		if svc == nil || svc.Spec.ClusterIP != "None" || !subset(svc.Spec.Selector, sts.Spec.Template.Metadata.Labels) {
			t.Errorf("StatefulSet worker's serviceName %q is not a headless Service selecting its pods: %+v", sts.Spec.ServiceName, svc)
		}
		if c := sts.Spec.Template.Spec.Containers; len(c) == 1 {
			f, _ := flags(c[0].Args[1:])
			if !strings.HasPrefix(f["--host"], "$(POD_NAME)."+sts.Spec.ServiceName+".") {
				t.Errorf("worker --host %q, want $(POD_NAME).%s.… (the pod's DNS name)", f["--host"], sts.Spec.ServiceName)
			}
		}
	}
}

// clusterTokenMounted returns why path in workload o's container is not the
// cluster token: a key of the Secret kustomization.yaml's secretGenerator
// makes from a file git ignores, in a read-only volume of that Secret whose
// files are owner-only.
func clusterTokenMounted(t testing.TB, objs []k8sObject, o *k8sObject, path string) error {
	t.Helper()
	k := find(objs, "Kustomization", "")
	if k == nil || len(k.SecretGenerator) != 1 {
		return errors.New("kustomization.yaml has no secretGenerator (the cluster token's Secret)")
	}
	gen := k.SecretGenerator[0]
	if len(gen.Files) != 1 || len(gen.Literals) > 0 || len(gen.Envs) > 0 {
		return fmt.Errorf("secretGenerator %s: files %v literals %v envs %v, want one file (the token in the repository would be everyone's)", gen.Name, gen.Files, gen.Literals, gen.Envs)
	}
	key, file, ok := strings.Cut(gen.Files[0], "=")
	if !ok {
		key, file = filepath.Base(gen.Files[0]), gen.Files[0]
	}
	pod := o.Spec.Template.Spec
	for _, m := range pod.Containers[0].VolumeMounts {
		if filepath.Join(m.MountPath, key) != path {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.Secret == nil || v.Secret.SecretName != gen.Name || len(v.Secret.Items) > 0 || !m.ReadOnly {
				return fmt.Errorf("volume %s at %s (read-only %v) is %+v, want all of Secret %s", m.Name, m.MountPath, m.ReadOnly, v.Secret, gen.Name)
			}
			// Kubernetes' default, 0644, is a token file glint refuses.
			if mode := v.Secret.DefaultMode; mode == nil || *mode&0o077 != 0 {
				got := "unset (0644)"
				if mode != nil {
					got = fmt.Sprintf("%#o", *mode)
				}
				return fmt.Errorf("volume %s of Secret %s: defaultMode %s, want it readable by its owner alone (0400)", m.Name, gen.Name, got)
			}
			rel := filepath.Join("deploy/k8s", file)
			root := tooltest.Root(t)
			if out, err := exec.Command("git", "-C", root, "check-ignore", "--no-index", rel).CombinedOutput(); err != nil {
				return fmt.Errorf("Secret %s comes from %s, which git does not ignore (%v %s)", gen.Name, rel, err, out)
			}
			return nil
		}
		return fmt.Errorf("volume %s at %s is not in the pod", m.Name, m.MountPath)
	}
	return fmt.Errorf("no volume mounted at %s with key %s of Secret %s", filepath.Dir(path), key, gen.Name)
}

// subset reports whether every label a Service selects is in labels.
func subset(sel map[string]any, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if s, ok := v.(string); !ok || labels[k] != s {
			return false
		}
	}
	return true
}
