// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/helm/render.go - renders a Helm chart the way `helm template` does,
// with Go's text/template and the sprig function library (Helm's own
// engine is the same two), plus the Helm built-ins: include, tpl, required,
// toYaml, fromYaml, toJson, fromJson, lookup, and the .Values, .Release,
// .Chart, .Capabilities, .Template objects. Built in GOPATH mode from
// Debian's packages (golang-go, golang-github-masterminds-sprig-dev,
// golang-gopkg-yaml.v2-dev, golang-gopkg-yaml.v3-dev); tests/integration/
// helm.sh builds and runs it. docs/development.md ("The Helm chart") says
// what it covers and what it does not.
//
// Stricter than `helm template`: a map key that does not exist is an error
// (missingkey=error, as `helm lint --strict`), so a misspelt .Values path
// fails instead of rendering as nothing.
//
// Usage: render -chart DIR [-f values.yaml]... [-name it] [-namespace ns]
//
//	[-out render.yaml] [-json docs.json] [-notes notes.txt]
//
// Exit 0 with the manifests; exit 1 with the error (template, function,
// YAML) on stderr.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yamlv2 "gopkg.in/yaml.v2"
	"gopkg.in/yaml.v3"
)

// Chart is what Helm exposes as .Chart (helm.sh/helm/v3/pkg/chart.Metadata
// field names; a field the chart does not set is empty)
type Chart struct {
	Name        string            `yaml:"name"`
	Home        string            `yaml:"home"`
	Sources     []string          `yaml:"sources"`
	Version     string            `yaml:"version"`
	Description string            `yaml:"description"`
	Keywords    []string          `yaml:"keywords"`
	Icon        string            `yaml:"icon"`
	APIVersion  string            `yaml:"apiVersion"`
	Condition   string            `yaml:"condition"`
	Tags        string            `yaml:"tags"`
	AppVersion  string            `yaml:"appVersion"`
	Deprecated  bool              `yaml:"deprecated"`
	Annotations map[string]string `yaml:"annotations"`
	KubeVersion string            `yaml:"kubeVersion"`
	Type        string            `yaml:"type"`
}

type Release struct {
	Name      string
	Namespace string
	Service   string
	Revision  int
	IsInstall bool
	IsUpgrade bool
}

type KubeVersion struct {
	Version    string
	Major      string
	Minor      string
	GitVersion string
}

func (k KubeVersion) String() string { return k.Version }

// VersionSet answers .Capabilities.APIVersions.Has
type VersionSet []string

func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
}

type Template struct {
	Name     string
	BasePath string
}

// Files is .Files: the chart's files other than its templates, as Helm's
// (helm.sh/helm/v3/pkg/engine/files.go): Get gives one file's text, "" for
// a file that is not there (as Helm does; the tests compare what a template
// made of it)
type Files struct{ dir string }

func (f Files) Get(name string) string {
	clean := path.Clean(name)
	if clean == "templates" || strings.HasPrefix(clean, "templates/") || strings.HasPrefix(clean, "../") {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(clean)))
	if err != nil {
		return ""
	}
	return string(b)
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// Helm reads values through JSON: every number is a float64 (a large
// integer prints as 1e+06 unless the template says `int`)
func jsonNormalise(v interface{}) (interface{}, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out interface{}
	err = json.Unmarshal(b, &out)
	return out, err
}

// yaml.v3 decodes mappings with non-string keys as map[interface{}]...;
// JSON cannot carry those, neither can Helm
func stringKeys(v interface{}) (interface{}, error) {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			y, err := stringKeys(x)
			if err != nil {
				return nil, err
			}
			t[k] = y
		}
		return t, nil
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("non-string key %v", k)
			}
			y, err := stringKeys(x)
			if err != nil {
				return nil, err
			}
			m[ks] = y
		}
		return m, nil
	case []interface{}:
		for i, x := range t {
			y, err := stringKeys(x)
			if err != nil {
				return nil, err
			}
			t[i] = y
		}
		return t, nil
	}
	return v, nil
}

func readValues(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if raw == nil {
		return map[string]interface{}{}, nil
	}
	if raw, err = stringKeys(raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	n, err := jsonNormalise(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	m, ok := n.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: not a mapping", file)
	}
	return m, nil
}

// Helm's coalescing of a values file over the defaults: maps merge key by
// key, anything else replaces, null deletes the key
func coalesce(dst, src map[string]interface{}) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		sm, sok := v.(map[string]interface{})
		dm, dok := dst[k].(map[string]interface{})
		if sok && dok {
			coalesce(dm, sm)
		} else {
			dst[k] = v
		}
	}
}

// Helm's toYaml: through JSON, then sigs.k8s.io/yaml's yaml.v2 encoding
// (two-space indent, sorted keys); an error renders as nothing, as in Helm
func toYAML(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var obj interface{}
	if err := yamlv2.Unmarshal(j, &obj); err != nil {
		return ""
	}
	b, err := yamlv2.Marshal(obj)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func required(warn string, val interface{}) (interface{}, error) {
	if val == nil {
		return val, errors.New(warn)
	}
	if s, ok := val.(string); ok && s == "" {
		return val, errors.New(warn)
	}
	return val, nil
}

const recursionMax = 1000

func funcMap(t **template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	// Helm removes these two: a chart must not read the renderer's environment
	delete(f, "env")
	delete(f, "expandenv")
	depth := map[string]int{}
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["required"] = required
	// no cluster: lookup finds nothing, as under `helm template`
	f["lookup"] = func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		if depth[name] > recursionMax {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		depth[name]++
		defer func() { depth[name]-- }()
		var buf strings.Builder
		err := (*t).ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		c, err := (*t).Clone()
		if err != nil {
			return "", err
		}
		c, err = c.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var buf strings.Builder
		if err := c.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return buf.String(), nil
	}
	return f
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "render: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	var files multiFlag
	chartDir := flag.String("chart", "", "chart directory")
	name := flag.String("name", "it", "release name")
	namespace := flag.String("namespace", "default", "release namespace")
	kube := flag.String("kube-version", "v1.29.0", "Kubernetes version for .Capabilities")
	outFile := flag.String("out", "-", "rendered manifests (helm template's format)")
	jsonFile := flag.String("json", "", "also write the documents as a JSON array")
	notesFile := flag.String("notes", "", "also write the rendered NOTES.txt")
	flag.Var(&files, "f", "values file over values.yaml (repeatable)")
	flag.Parse()
	if *chartDir == "" {
		fail("-chart is required")
	}

	var chart Chart
	data, err := os.ReadFile(filepath.Join(*chartDir, "Chart.yaml"))
	if err != nil {
		fail("%v", err)
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		fail("Chart.yaml: %v", err)
	}
	values, err := readValues(filepath.Join(*chartDir, "values.yaml"))
	if err != nil {
		fail("%v", err)
	}
	for _, f := range files {
		over, err := readValues(f)
		if err != nil {
			fail("%v", err)
		}
		coalesce(values, over)
	}

	kv := strings.TrimPrefix(*kube, "v")
	parts := strings.SplitN(kv, ".", 3)
	if len(parts) < 2 {
		fail("-kube-version %s: want vMAJOR.MINOR.PATCH", *kube)
	}
	caps := Capabilities{
		KubeVersion: KubeVersion{Version: "v" + kv, Major: parts[0], Minor: parts[1],
			GitVersion: "v" + kv},
		APIVersions: VersionSet{"v1", "apps/v1", "batch/v1", "policy/v1",
			"rbac.authorization.k8s.io/v1", "networking.k8s.io/v1"},
	}
	release := Release{Name: *name, Namespace: *namespace, Service: "Helm", Revision: 1,
		IsInstall: true}

	// every file under templates/, parsed into one set named
	// <chart>/templates/<path> as Helm names them
	var names []string
	tdir := filepath.Join(*chartDir, "templates")
	err = filepath.Walk(tdir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		fail("%v", err)
	}
	sort.Strings(names)
	var t *template.Template
	t = template.New("chart").Option("missingkey=error").Funcs(funcMap(&t))
	tname := map[string]string{}
	for _, p := range names {
		rel, _ := filepath.Rel(tdir, p)
		n := path.Join(chart.Name, "templates", filepath.ToSlash(rel))
		tname[p] = n
		src, err := os.ReadFile(p)
		if err != nil {
			fail("%v", err)
		}
		if _, err := t.New(n).Parse(string(src)); err != nil {
			fail("%v", err)
		}
	}

	var out bytes.Buffer
	var docs []interface{}
	for _, p := range names {
		n := tname[p]
		base := filepath.Base(p)
		if strings.HasPrefix(base, "_") {
			continue // partials define templates, render nothing
		}
		top := map[string]interface{}{
			"Values":       values,
			"Release":      release,
			"Chart":        chart,
			"Capabilities": caps,
			"Template":     Template{Name: n, BasePath: path.Join(chart.Name, "templates")},
			"Files":        Files{dir: *chartDir},
		}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, n, top); err != nil {
			fail("%v", err)
		}
		text := buf.String()
		if base == "NOTES.txt" {
			if *notesFile != "" {
				if err := os.WriteFile(*notesFile, []byte(text), 0o644); err != nil {
					fail("%v", err)
				}
			}
			continue
		}
		// one document per "---", empty ones dropped, as Helm does
		for _, doc := range strings.Split(text, "\n---") {
			doc = strings.TrimPrefix(doc, "---")
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var obj interface{}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				fail("%s: YAML parse error: %v", n, err)
			}
			if obj == nil {
				continue // comments only
			}
			if obj, err = stringKeys(obj); err != nil {
				fail("%s: %v", n, err)
			}
			docs = append(docs, map[string]interface{}{"source": n, "object": obj})
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", n, strings.Trim(doc, "\n"))
		}
	}

	w := os.Stdout
	if *outFile != "-" {
		if w, err = os.Create(*outFile); err != nil {
			fail("%v", err)
		}
	}
	if _, err := w.Write(out.Bytes()); err != nil {
		fail("%v", err)
	}
	if *jsonFile != "" {
		b, err := json.MarshalIndent(docs, "", " ")
		if err != nil {
			fail("documents to JSON: %v", err)
		}
		if err := os.WriteFile(*jsonFile, b, 0o644); err != nil {
			fail("%v", err)
		}
	}
}
