// Command module shows an application HTTP module mounted on the broker's
// server, behind the same authentication: POST /app/notify takes a small
// JSON request from any authenticated caller, reads who the caller is from
// the request context, and publishes a governed notification under the
// module's own contract (as the orders service), through every gate.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// Module is the mounted handler. It holds a session of its own principal;
// callers never get the module's rights, only its service.
type Module struct {
	sess pigeon.Session
}

// NewModule negotiates the module's own contract.
func NewModule(ctx context.Context, e *pigeon.Engine, credential string) (*Module, error) {
	sess, err := e.Connect(ctx, credential, []string{"notifications.send"}, pigeon.WithRegion("uk"))
	if err != nil {
		return nil, err
	}
	return &Module{sess: sess}, nil
}

type notifyRequest struct {
	RecipientID string `json:"recipientId"`
	TemplateID  string `json:"templateId"`
}

// ServeHTTP publishes one notification for the authenticated caller.
func (m *Module) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller := server.PrincipalFrom(r.Context())
	var in notifyRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&in); err != nil || in.RecipientID == "" || in.TemplateID == "" {
		http.Error(w, `{"error":{"code":"BAD_REQUEST","message":"recipientId and templateId are required","details":{}}}`, http.StatusBadRequest)
		return
	}
	data, _ := json.Marshal(map[string]any{"recipientId": in.RecipientID, "channel": "email", "templateId": in.TemplateID,
		"params": map[string]string{"requestedBy": caller.ID}})
	res, err := m.sess.Publish(r.Context(), &pigeon.Message{Type: "notification.requested", Subject: "notifications.send",
		Intent: "send_notification", Classification: "pii", IdempotencyKey: caller.ID + "/" + in.RecipientID + "/" + in.TemplateID, Data: data})
	if err != nil {
		server.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": res.Status, "messageId": res.Message.ID, "requestedBy": caller.ID})
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "module:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	if err != nil {
		return err
	}
	defer e.Shutdown(ctx)
	srv := server.New(e, nil)
	mod, err := NewModule(ctx, e, "orders-token")
	if err != nil {
		return err
	}
	if err := srv.Mount("POST /app/notify", mod); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(l)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	base := "http://" + l.Addr().String()
	post := func(token, body string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/app/notify", strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b)), nil
	}
	fmt.Fprintf(out, "module mounted at %s/app/notify\n", base)
	for _, c := range []struct{ who, token, body string }{
		{"checkout-api (authenticated)", "checkout-token", `{"recipientId":"cust-42","templateId":"order-shipped"}`},
		{"no credential", "", `{"recipientId":"cust-42","templateId":"order-shipped"}`},
		{"checkout-api, bad request", "checkout-token", `{"recipientId":""}`},
	} {
		status, body, err := post(c.token, c.body)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %d %s\n", c.who, status, body)
	}
	worker, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"}, pigeon.WithRegion("uk"))
	if err != nil {
		return err
	}
	got, err := worker.Receive(ctx, "notifications.send", 10)
	if err != nil {
		return err
	}
	for _, m := range got {
		fmt.Fprintf(out, "notifier-worker received %s from %s: %s\n", m.ID, m.Source, m.Data)
	}
	return nil
}
