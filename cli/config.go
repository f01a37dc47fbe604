package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"gopkg.in/yaml.v3"

	"pigeon"
	"pigeon/identity"
	"pigeon/internal/yamlnum"
	"pigeon/server"
)

// fileConfig is the --config file (YAML): everything the serve flags say,
// plus TLS, mTLS, OIDC issuers and the order of authentication methods.
// docs/identity.md describes it; examples/identity/pigeon.yaml is an
// example.
type fileConfig struct {
	Addr            string        `yaml:"addr"`
	Data            *string       `yaml:"data"`
	Policies        string        `yaml:"policies"`
	Tokens          string        `yaml:"tokens"`
	Region          string        `yaml:"region"`
	Sync            string        `yaml:"sync"`
	NoPreallocate   bool          `yaml:"no_preallocate"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	Verbose         bool          `yaml:"verbose"`
	AllowedOrigins  []string      `yaml:"allowed_origins"`
	AllowedHosts    []string      `yaml:"allowed_hosts"`
	TrustedProxies  []string      `yaml:"trusted_proxies"`
	MesgdSubject    string        `yaml:"mesgd_subject"`
	ProgramVersions int           `yaml:"program_versions"`
	WSPublishRate   float64       `yaml:"ws_publish_rate"`
	MaxSubs         int           `yaml:"max_subscriptions"`
	MaxGroups       int           `yaml:"max_groups"`
	MaxStoredGroups int           `yaml:"max_stored_groups"`
	MaxAccounts     int           `yaml:"max_accounts"`
	MaxRoles        int           `yaml:"max_roles"`
	MaxGrants       int           `yaml:"max_grants_per_account"`
	MaxConns        int           `yaml:"max_connections"`
	MaxConnsPerIP   int           `yaml:"max_connections_per_ip"`
	IPv6SitePrefix  *int          `yaml:"ipv6_site_prefix"`
	IPv6SiteFactor  int           `yaml:"ipv6_site_factor"`
	MaxPrograms     int           `yaml:"max_programs"`
	MaxProgramMemMB int64         `yaml:"max_program_memory_mb"`
	ProgramMaxHops  int           `yaml:"program_max_hops"`
	ProgramMaxDesc  int64         `yaml:"program_max_descendants"`
	ProgramLineage  int           `yaml:"program_lineage_size"`
	MaxReadMemMB    int64         `yaml:"max_read_memory_mb"`
	MaxReadShareMB  int64         `yaml:"max_read_memory_per_principal_mb"`
	LogFormat       string        `yaml:"log_format"`
	LogLevel        string        `yaml:"log_level"`
	MetricsAddr     string        `yaml:"metrics_addr"`
	MetricsToken    string        `yaml:"metrics_token_file"`
	TLS             struct {
		Cert string `yaml:"cert"`
		Key  string `yaml:"key"`
	} `yaml:"tls"`
	MTLS struct {
		ClientCA     []string            `yaml:"client_ca"`
		TrustDomains []trustDomainConfig `yaml:"trust_domains"`
		Mode         string              `yaml:"mode"`
	} `yaml:"mtls"`
	OIDC struct {
		Issuers []issuerConfig `yaml:"issuers"`
	} `yaml:"oidc"`
	Auth struct {
		Order         []string      `yaml:"order"`
		MaxFailures   int           `yaml:"max_failures"`
		FailureWindow time.Duration `yaml:"failure_window"`
	} `yaml:"auth"`
}

// trustDomainConfig is a trust domain: a bare name, whose certificates the
// CAs of client_ca issue, or {name, ca: [files]} with its own bundle.
type trustDomainConfig struct {
	Name string
	CA   []string
	line int
}

func (t *trustDomainConfig) UnmarshalYAML(n *yaml.Node) error {
	t.line = n.Line
	if n.Kind == yaml.ScalarNode {
		t.Name = n.Value
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a trust domain is a name or {name, ca}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			if err := v.Decode(&t.Name); err != nil {
				return err
			}
		case "ca":
			if err := v.Decode(&t.CA); err != nil {
				return err
			}
		default:
			return fmt.Errorf("line %d: field %s not found in type trust domain", k.Line, k.Value)
		}
	}
	return nil
}

type issuerConfig struct {
	Issuer             string            `yaml:"issuer"`
	Audience           []string          `yaml:"audience"`
	Clients            []string          `yaml:"clients"`
	JWKSURL            string            `yaml:"jwks_url"`
	Algorithms         []string          `yaml:"algorithms"`
	PrincipalClaim     string            `yaml:"principal_claim"`
	RolesClaim         string            `yaml:"roles_claim"`
	Roles              []string          `yaml:"roles"`
	AttributeClaims    map[string]string `yaml:"attribute_claims"`
	Leeway             time.Duration     `yaml:"leeway"`
	MaxLifetime        time.Duration     `yaml:"max_lifetime"`
	RefreshInterval    time.Duration     `yaml:"refresh_interval"`
	MinRefreshInterval time.Duration     `yaml:"min_refresh_interval"`
	MaxKeyAge          time.Duration     `yaml:"max_key_age"`
	TrustDomains       []string          `yaml:"trust_domains"`
	PrincipalPrefix    string            `yaml:"principal_prefix"`
}

// configError is a refusal of the config file at a line.
func configError(path string, line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, args...))
}

var yamlLine = regexp.MustCompile(`line (\d+): (.*)`)

// loadConfig reads the config file into cfg (the defaults), resolving
// relative file names against the file's directory. An unknown key, a
// value of the wrong type and an invalid value are refused with the file,
// the line and the reason.
func loadConfig(path string, cfg *serveConfig) error {
	if err := checkNotWorldWritable(path); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	b, err := readRegularFile(path, maxConfigFile)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return yamlError(path, err)
	}
	var f fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // an empty file configures nothing
		return yamlError(path, err)
	}
	// yaml.v3 truncates a fraction in an integer setting:
	// "max_connections_per_ip: 0.5" would be 0, no cap.
	if n := yamlnum.Fraction(&root, reflect.TypeFor[fileConfig]()); n != nil {
		return configError(path, n.Line, "%s is not an integer: this setting takes a whole number", n.Value)
	}
	at := func(keys ...string) int { return lineOf(&root, keys...) }
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.addr, f.Addr)
	if f.Data != nil {
		cfg.data = rel(*f.Data)
	}
	set(&cfg.policies, rel(f.Policies))
	set(&cfg.tokens, rel(f.Tokens))
	set(&cfg.region, f.Region)
	if f.Sync != "" {
		if _, err := syncMode(f.Sync); err != nil {
			return configError(path, at("sync"), "sync must be batch, always or none, not %q", f.Sync)
		}
		cfg.sync = f.Sync
	}
	if f.NoPreallocate {
		cfg.noPreallocate = true
	}
	if f.ShutdownTimeout < 0 {
		return configError(path, at("shutdown_timeout"), "shutdown_timeout must not be negative")
	}
	if f.ShutdownTimeout > 0 {
		cfg.shutdownTimeout = f.ShutdownTimeout
	}
	cfg.verbose = cfg.verbose || f.Verbose
	for i, o := range f.AllowedOrigins {
		if err := checkOrigin(o); err != nil {
			return configError(path, at("allowed_origins", strconv.Itoa(i)), "%v", err)
		}
		cfg.allowedOrigins = append(cfg.allowedOrigins, o)
	}
	for i, h := range f.AllowedHosts {
		if err := checkHost(h); err != nil {
			return configError(path, at("allowed_hosts", strconv.Itoa(i)), "%v", err)
		}
		cfg.allowedHosts = append(cfg.allowedHosts, h)
	}
	for i, p := range f.TrustedProxies {
		if _, err := server.ParseTrustedProxies([]string{p}); err != nil {
			return configError(path, at("trusted_proxies", strconv.Itoa(i)), "%v", err)
		}
		cfg.trustedProxies = append(cfg.trustedProxies, p)
	}
	set(&cfg.mesgdSubject, f.MesgdSubject)
	if f.ProgramVersions < 0 {
		return configError(path, at("program_versions"), "program_versions must not be negative")
	}
	if f.ProgramVersions > 0 {
		cfg.programVersions = f.ProgramVersions
	}
	if math.IsNaN(f.WSPublishRate) || math.IsInf(f.WSPublishRate, 0) {
		return configError(path, at("ws_publish_rate"), "ws_publish_rate must be a finite number (negative: no limit)")
	}
	if f.WSPublishRate != 0 {
		cfg.wsPublishRate = f.WSPublishRate
	}
	if f.MaxSubs != 0 {
		cfg.maxSubs = f.MaxSubs
	}
	if f.MaxGroups != 0 {
		cfg.maxGroups = f.MaxGroups
	}
	if f.MaxStoredGroups != 0 {
		cfg.maxStoredGroups = f.MaxStoredGroups
	}
	if f.MaxAccounts != 0 {
		cfg.maxAccounts = f.MaxAccounts
	}
	if f.MaxRoles != 0 {
		cfg.maxRoles = f.MaxRoles
	}
	if f.MaxGrants != 0 {
		cfg.maxGrants = f.MaxGrants
	}
	if f.MaxConns != 0 {
		cfg.maxConns = f.MaxConns
	}
	if f.MaxConnsPerIP != 0 {
		cfg.maxConnsPerIP = f.MaxConnsPerIP
	}
	if f.IPv6SitePrefix != nil {
		n, err := sitePrefix(strconv.Itoa(*f.IPv6SitePrefix))
		if err != nil {
			return configError(path, at("ipv6_site_prefix"), "ipv6_site_prefix: %v", err)
		}
		cfg.site.Bits = n
	}
	if f.IPv6SiteFactor < 0 {
		return configError(path, at("ipv6_site_factor"), "ipv6_site_factor must be at least 1 (a site's limit in per-source limits)")
	}
	if f.IPv6SiteFactor > 0 {
		cfg.site.Factor = f.IPv6SiteFactor
	}
	if f.MaxPrograms != 0 {
		cfg.maxPrograms = f.MaxPrograms
	}
	if f.MaxProgramMemMB != 0 {
		cfg.maxProgramMemMB = f.MaxProgramMemMB
	}
	if f.ProgramMaxHops != 0 {
		cfg.programMaxHops = f.ProgramMaxHops
	}
	if f.ProgramMaxDesc != 0 {
		cfg.programMaxDescendants = f.ProgramMaxDesc
	}
	if f.ProgramLineage < 0 {
		return configError(path, at("program_lineage_size"), "program_lineage_size must be positive (0: the default, 65536)")
	}
	if f.ProgramLineage > 0 {
		cfg.programLineage = f.ProgramLineage
	}
	if f.MaxReadMemMB != 0 {
		cfg.maxReadMemMB = f.MaxReadMemMB
	}
	if f.MaxReadShareMB != 0 {
		cfg.maxReadShareMB = f.MaxReadShareMB
	}
	set(&cfg.logFormat, f.LogFormat)
	set(&cfg.logLevel, f.LogLevel)
	set(&cfg.metricsAddr, f.MetricsAddr)
	set(&cfg.metricsTokenFile, rel(f.MetricsToken))
	if (f.TLS.Cert == "") != (f.TLS.Key == "") {
		return configError(path, at("tls"), "tls needs both cert and key")
	}
	set(&cfg.tlsCert, rel(f.TLS.Cert))
	set(&cfg.tlsKey, rel(f.TLS.Key))
	for i, p := range f.MTLS.ClientCA {
		if p == "" {
			return configError(path, at("mtls", "client_ca", strconv.Itoa(i)), "an empty file name")
		}
		cfg.clientCA = append(cfg.clientCA, rel(p))
	}
	for _, td := range f.MTLS.TrustDomains {
		if err := checkTrustDomain(td.Name); err != nil {
			return configError(path, td.line, "%v", err)
		}
		cfg.trustDomains = append(cfg.trustDomains, td.Name)
		if len(td.CA) > 0 {
			if cfg.domainCA == nil {
				cfg.domainCA = map[string][]string{}
			}
			for _, p := range td.CA {
				cfg.domainCA[td.Name] = append(cfg.domainCA[td.Name], rel(p))
			}
		}
	}
	if f.MTLS.Mode != "" {
		if f.MTLS.Mode != "required" && f.MTLS.Mode != "optional" {
			return configError(path, at("mtls", "mode"), "mode must be required or optional, not %q", f.MTLS.Mode)
		}
		cfg.mtlsMode = f.MTLS.Mode
	}
	for i, ic := range f.OIDC.Issuers {
		in := identity.Issuer{URL: ic.Issuer, Audiences: ic.Audience, Clients: ic.Clients, JWKSURL: ic.JWKSURL, Algorithms: ic.Algorithms,
			PrincipalClaim: ic.PrincipalClaim, RolesClaim: ic.RolesClaim, Roles: ic.Roles, AttributeClaims: ic.AttributeClaims, Leeway: ic.Leeway, MaxLifetime: ic.MaxLifetime,
			RefreshInterval: ic.RefreshInterval, MinRefreshInterval: ic.MinRefreshInterval, MaxKeyAge: ic.MaxKeyAge, TrustDomains: ic.TrustDomains,
			PrincipalPrefix: ic.PrincipalPrefix}
		if _, err := identity.CheckIssuer(in); err != nil {
			return configError(path, at("oidc", "issuers", strconv.Itoa(i)), "%v", err)
		}
		cfg.issuers = append(cfg.issuers, in)
	}
	for i, m := range f.Auth.Order {
		if !slices.Contains(authMethods, m) {
			return configError(path, at("auth", "order", strconv.Itoa(i)), "unknown method %q (known: %s)", m, strings.Join(authMethods, ", "))
		}
	}
	if len(f.Auth.Order) > 0 {
		cfg.authOrder = f.Auth.Order
	}
	if f.Auth.MaxFailures < 0 {
		return configError(path, at("auth", "max_failures"), "max_failures must not be negative")
	}
	if f.Auth.FailureWindow < 0 {
		return configError(path, at("auth", "failure_window"), "failure_window must not be negative")
	}
	if f.Auth.MaxFailures > 0 {
		cfg.maxFailures = f.Auth.MaxFailures
	}
	if f.Auth.FailureWindow > 0 {
		cfg.failureWindow = f.Auth.FailureWindow
	}
	return nil
}

// authMethods are the names of auth.order and --auth-order.
var authMethods = []string{string(pigeon.AuthMTLS), string(pigeon.AuthOIDC), string(pigeon.AuthGrant), string(pigeon.AuthToken)}

// checkTrustDomain refuses a trust domain go-spiffe would not accept.
func checkTrustDomain(td string) error {
	if _, err := spiffeid.TrustDomainFromString(td); err != nil || strings.Contains(td, "/") {
		return fmt.Errorf("trust domain %q is not valid: a bare lower-case name such as example.org", td)
	}
	return nil
}

// checkOrigin refuses an origin pattern the WebSocket endpoint could not
// match against a browser's Origin header (path.Match syntax, host[:port]
// or scheme://host[:port]).
func checkOrigin(o string) error {
	if strings.TrimSpace(o) == "" {
		return errors.New("an empty origin pattern")
	}
	if _, err := path.Match(o, ""); err != nil {
		return fmt.Errorf("origin pattern %q is not valid: %v", o, err)
	}
	if strings.ContainsAny(o, "/?#") && !strings.Contains(o, "://") || strings.Count(o, "/") > 2 {
		return fmt.Errorf("origin pattern %q is not valid: a host pattern such as app.example.com or https://*.example.com, without a path", o)
	}
	return nil
}

// yamlError turns a yaml error into file:line: reason lines.
func yamlError(path string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		lines := make([]string, 0, len(te.Errors))
		for _, e := range te.Errors {
			if m := yamlLine.FindStringSubmatch(e); m != nil {
				lines = append(lines, fmt.Sprintf("%s:%s: %s", path, m[1], yamlReason(m[2])))
			} else {
				lines = append(lines, fmt.Sprintf("%s: %s", path, e))
			}
		}
		return errors.New(strings.Join(lines, "\n"))
	}
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s:%s: %s", path, m[1], yamlReason(m[2]))
	}
	return fmt.Errorf("%s: %v", path, err)
}

// yamlReason says "unknown key" for yaml's "field x not found in type y".
func yamlReason(r string) string {
	if k, ok := strings.CutPrefix(r, "field "); ok {
		if name, _, ok := strings.Cut(k, " not found in type"); ok {
			return fmt.Sprintf("unknown key %q", name)
		}
	}
	return r
}

// lineOf is the line of the value at keys (mapping keys, or sequence
// indexes) in the document, or of the deepest part of it that exists.
func lineOf(root *yaml.Node, keys ...string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, k := range keys {
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					line = n.Content[i].Line
					next = n.Content[i+1]
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(k); err == nil && i < len(n.Content) {
				next = n.Content[i]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}
