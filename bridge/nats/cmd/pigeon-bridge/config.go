package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	natsbridge "pigeon/bridge/nats"
)

// config is the YAML file (docs/bridges.md, "Configuration"). Unknown keys
// are refused, so a misspelt one is an error rather than a default.
type config struct {
	Pigeon struct {
		// URL is the broker's WebSocket endpoint (ws://, wss://, http://
		// or https://; without a path: /v1/ws).
		URL            string        `yaml:"url"`
		Credential     string        `yaml:"credential"`
		CredentialFile string        `yaml:"credentialFile"`
		Region         string        `yaml:"region"`
		ContractTTL    time.Duration `yaml:"contractTTL"`
	} `yaml:"pigeon"`
	NATS struct {
		URL       string `yaml:"url"`
		CredsFile string `yaml:"credsFile"`
	} `yaml:"nats"`
	PublishTimeout    time.Duration `yaml:"publishTimeout"`
	MaxReconnectDelay time.Duration `yaml:"maxReconnectDelay"`
	MaxMessageBytes   int           `yaml:"maxMessageBytes"`
	// MaxHops is natsbridge.Options.MaxHops. It bounds a loop through
	// bridges only when the broker lets the credential's principal
	// publish at a depth: give its account the role bridge
	// (pigeon.RoleBridge); without it every message is published at 0
	// and the bridge logs so once a connection.
	MaxHops  int           `yaml:"maxHops"`
	LogLevel string        `yaml:"logLevel"`
	Routes   []routeConfig `yaml:"routes"`
}

type routeConfig struct {
	Name        string `yaml:"name"`
	Direction   string `yaml:"direction"`
	Subject     string `yaml:"subject"`
	NATSSubject string `yaml:"natsSubject"`
	JetStream   bool   `yaml:"jetstream"`
	Stream      string `yaml:"stream"`
	Durable     string `yaml:"durable"`
	Selector    string `yaml:"selector"`
	Filter      string `yaml:"filter"`
	Group       string `yaml:"group"`
	MaxInFlight int    `yaml:"maxInFlight"`
	Payload     string `yaml:"payload"`
	Template    struct {
		Type           string `yaml:"type"`
		Intent         string `yaml:"intent"`
		Classification string `yaml:"classification"`
		Region         string `yaml:"region"`
	} `yaml:"template"`
}

// parseConfig reads one YAML document, refusing unknown keys and the
// omissions the bridge cannot start without. Routes are checked by
// natsbridge.New.
func parseConfig(data []byte) (*config, error) {
	var c config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, err
	}
	switch {
	case c.Pigeon.URL == "":
		return nil, errors.New("pigeon.url is required")
	case c.Pigeon.Credential == "" && c.Pigeon.CredentialFile == "":
		return nil, errors.New("pigeon.credential or pigeon.credentialFile is required")
	case c.Pigeon.Credential != "" && c.Pigeon.CredentialFile != "":
		return nil, errors.New("pigeon.credential and pigeon.credentialFile are exclusive")
	case c.NATS.URL == "":
		return nil, errors.New("nats.url is required")
	case len(c.Routes) == 0:
		return nil, errors.New("routes: at least one route is required")
	}
	for i, r := range c.Routes {
		if r.Direction != string(natsbridge.In) && r.Direction != string(natsbridge.Out) {
			return nil, fmt.Errorf("routes[%d] (%q): direction must be in or out", i, r.Name)
		}
		switch r.Payload {
		case "", "auto", string(natsbridge.PayloadEnvelope), string(natsbridge.PayloadData):
		default:
			return nil, fmt.Errorf("routes[%d] (%q): payload must be auto, envelope or data", i, r.Name)
		}
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, errors.New("logLevel must be debug, info, warn or error")
	}
	return &c, nil
}

// credential is the bridge's credential: the value, or the first line of
// the file (surrounding space trimmed).
func (c *config) credential() (string, error) {
	if c.Pigeon.Credential != "" {
		return c.Pigeon.Credential, nil
	}
	b, err := os.ReadFile(c.Pigeon.CredentialFile)
	if err != nil {
		return "", fmt.Errorf("pigeon.credentialFile: %w", err)
	}
	cred, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if cred = strings.TrimSpace(cred); cred == "" {
		return "", fmt.Errorf("pigeon.credentialFile %s is empty", c.Pigeon.CredentialFile)
	}
	return cred, nil
}

// routes converts the routes for natsbridge.Options.
func (c *config) routes() []natsbridge.Route {
	var out []natsbridge.Route
	for _, r := range c.Routes {
		p := natsbridge.Payload(r.Payload)
		if p == "auto" {
			p = natsbridge.PayloadAuto
		}
		out = append(out, natsbridge.Route{
			Name: r.Name, Direction: natsbridge.Direction(r.Direction), Subject: r.Subject, NATSSubject: r.NATSSubject,
			JetStream: r.JetStream, Stream: r.Stream, Durable: r.Durable,
			Selector: r.Selector, Filter: r.Filter, Group: r.Group, MaxInFlight: r.MaxInFlight,
			Payload:  p,
			Template: natsbridge.Template{Type: r.Template.Type, Intent: r.Template.Intent, Classification: r.Template.Classification, Region: r.Template.Region},
		})
	}
	return out
}
