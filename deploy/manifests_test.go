// Package deploy tests the deployment files: the Kubernetes manifest
// decoded strictly into the real API types, and its configuration
// validated as throttled validates it.
package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/throttled/throttled/config"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// docs splits a multi-document YAML file.
func docs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return split(b)
}

// split splits a multi-document YAML stream.
func split(b []byte) []string {
	var out []string
	for _, d := range regexp.MustCompile(`(?m)^---$`).Split(string(b), -1) {
		if strings.TrimSpace(d) != "" {
			out = append(out, d)
		}
	}
	return out
}

// TestKubernetesManifestDecodesStrictly decodes every document of the
// sidecar manifest into its Kubernetes type, refusing unknown fields (a
// misspelt or misplaced key fails here, not at kubectl apply), and checks
// what makes it deploy: probes the kubelet can reach (no host, on the
// port the sidecar listens on, on every interface), the image's user, a
// pod the Restricted Pod Security Standard admits, and a configuration
// throttled accepts.
func TestKubernetesManifestDecodesStrictly(t *testing.T) {
	checkManifests(t, docs(t, "kubernetes-sidecar.yaml"))
}

// render builds the kustomization in dir as kustomize build does.
func render(t *testing.T, dir string) []string {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return split(b)
}

// The kustomize base (deploy/) and the example overlay render, and what
// they render passes the manifest's checks; the overlay's images, namespace
// and patch take effect.
func TestKustomizeBaseAndOverlayRender(t *testing.T) {
	base := render(t, ".")
	if len(base) != 2 {
		t.Fatalf("the base renders %d resources; want the ConfigMap and the Deployment", len(base))
	}
	checkManifests(t, base)
	overlay := render(t, "../examples/kustomize")
	cm, dep := checkManifests(t, overlay)
	if dep.Namespace != "batch" || cm.Namespace != "batch" || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("overlay: namespace %q/%q, replicas %v; want batch and 2", dep.Namespace, cm.Namespace, dep.Spec.Replicas)
	}
	for _, ct := range dep.Spec.Template.Spec.Containers {
		if !strings.HasPrefix(ct.Image, "registry.example.com/") {
			t.Errorf("overlay: container %s image %q; want the overlay's registry", ct.Name, ct.Image)
		}
	}
	if dep.Labels["app.kubernetes.io/part-of"] != "throttled" {
		t.Errorf("labels %v; want the base's part-of label", dep.Labels)
	}
}

// checkManifests decodes each document strictly and checks them as
// TestKubernetesManifestDecodesStrictly says.
func checkManifests(t *testing.T, documents []string) (corev1.ConfigMap, appsv1.Deployment) {
	t.Helper()
	var cm corev1.ConfigMap
	var dep appsv1.Deployment
	for _, d := range documents {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(d), &head); err != nil {
			t.Fatal(err)
		}
		var err error
		switch head.Kind {
		case "ConfigMap":
			err = yaml.UnmarshalStrict([]byte(d), &cm)
		case "Deployment":
			err = yaml.UnmarshalStrict([]byte(d), &dep)
		default:
			t.Fatalf("a %q the test does not know", head.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %v", head.Kind, err)
		}
	}
	hcl := cm.Data["throttled.hcl"]
	path := filepath.Join(t.TempDir(), "throttled.hcl")
	if err := os.WriteFile(path, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.LoadWithoutSecrets(path)
	if err != nil {
		t.Fatalf("the ConfigMap's configuration: %v", err)
	}
	host, port, _ := strings.Cut(c.Listen, ":")
	if host != "0.0.0.0" && host != "" {
		t.Errorf("listen %s: the kubelet probes the pod's IP, not the pod's loopback", c.Listen)
	}
	user := containerfileUser(t)

	pod := dep.Spec.Template.Spec
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		pod.SecurityContext.SeccompProfile == nil || pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v; want runAsNonRoot and the RuntimeDefault seccomp profile (Restricted)", pod.SecurityContext)
	}
	var sidecar *corev1.Container
	for i, ct := range pod.Containers {
		if ct.SecurityContext == nil || ct.SecurityContext.AllowPrivilegeEscalation == nil || *ct.SecurityContext.AllowPrivilegeEscalation ||
			ct.SecurityContext.Capabilities == nil || len(ct.SecurityContext.Capabilities.Drop) != 1 || ct.SecurityContext.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s: securityContext %+v; want no privilege escalation and every capability dropped (Restricted)", ct.Name, ct.SecurityContext)
		}
		if strings.HasSuffix(ct.Image, ":latest") || !strings.Contains(ct.Image, ":") {
			t.Errorf("container %s: image %q; name a tag you built", ct.Name, ct.Image)
		}
		if ct.Name == "throttled" {
			sidecar = &pod.Containers[i]
		}
	}
	if sidecar == nil {
		t.Fatal("no throttled container")
		return cm, dep
	}
	if sc := sidecar.SecurityContext; sc.RunAsUser == nil || strconv.FormatInt(*sc.RunAsUser, 10) != user || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("sidecar securityContext %+v; want runAsUser %s (the image's USER) and a read-only root", sc, user)
	}
	ports := map[string]string{}
	for _, p := range sidecar.Ports {
		ports[p.Name] = strconv.Itoa(int(p.ContainerPort))
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": sidecar.LivenessProbe, "readiness": sidecar.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: %+v; want an HTTP probe", name, probe)
			continue
		}
		if probe.HTTPGet.Host != "" {
			t.Errorf("%s probe sets host %q: the kubelet would probe that address from its side (and Baseline forbids it)", name, probe.HTTPGet.Host)
		}
		got := probe.HTTPGet.Port.String()
		if p, ok := ports[got]; ok {
			got = p
		}
		if got != port {
			t.Errorf("%s probe on port %s; the sidecar listens on %s", name, got, port)
		}
	}
	if want := []string{"run", "--config", "/etc/throttled/throttled.hcl"}; len(sidecar.Args) < 3 || strings.Join(sidecar.Args[:3], " ") != strings.Join(want, " ") {
		t.Errorf("sidecar args %v; want %v", sidecar.Args, want)
	}
	return cm, dep
}

// containerfileUser is the image's USER uid.
func containerfileUser(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER (\d+)`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("the Containerfile names no numeric USER")
	}
	return m[1]
}
