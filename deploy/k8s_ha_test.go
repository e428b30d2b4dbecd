package deploy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// deploy/k8s/ha: three masters on etcd in place of the base's one, workers
// given every master, the base's Service routing to the ready master only.
func TestK8sHAOverlayRunsThreeMastersOnEtcd(t *testing.T) {
	objs := loadK8sDir(t, "deploy/k8s/ha")
	var k *k8sObject
	for i := range objs {
		if objs[i].Resources != nil {
			k = &objs[i]
		}
	}
	if k == nil || !slices.Equal(k.Resources, []string{"..", "etcd.yaml", "masters.yaml"}) {
		t.Fatalf("ha/kustomization.yaml resources %v, want the base, etcd.yaml and masters.yaml", k)
	}
	masters := find(objs, "StatefulSet", "master")
	if masters == nil || masters.Spec.Replicas != 3 || masters.Spec.ServiceName != "master-ha" {
		t.Fatalf("masters: %+v, want StatefulSet master, 3 replicas, serviceName master-ha", masters)
	}
	headless := find(objs, "Service", "master-ha")
	if headless == nil || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service master-ha %+v, want headless and publishing standbys (not ready) too", headless)
	}
	c := masters.Spec.Template.Spec.Containers[0]
	f, _ := flags(c.Args[1:])
	etcd := find(objs, "StatefulSet", "etcd")
	if etcd == nil || f["--recovery-mode"] != "etcd" ||
		f["--etcd-endpoints"] != fmt.Sprintf("http://etcd-0.%s.glint.svc:2379", etcd.Spec.ServiceName) {
		t.Errorf("masters run %v with etcd %+v, want --recovery-mode etcd on the etcd StatefulSet's pod", c.Args, etcd)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("masters' readiness %q, want /readyz (the leader only is ready)", c.ReadinessProbe.HTTPGet.Path)
	}
	var all []string
	for i := range masters.Spec.Replicas {
		all = append(all, fmt.Sprintf("http://master-%d.master-ha.glint.svc:7077", i))
	}
	if !slices.ContainsFunc(k.Patches, func(p struct {
		Patch string `yaml:"patch"`
	}) bool {
		return strings.Contains(p.Patch, "value: "+strings.Join(all, ","))
	}) {
		t.Errorf("no patch gives the workers every master %v", all)
	}
	// The base's worker takes its master list as args[2], which the patch replaces.
	base := find(loadK8s(t), "StatefulSet", "worker")
	if args := base.Spec.Template.Spec.Containers[0].Args; len(args) < 3 || args[1] != "--master" {
		t.Errorf("the base worker's args %v: the patch replaces args/2, want --master before it", args)
	}
}
