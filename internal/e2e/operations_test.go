package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/verify"
)

// operationsSQL returns the SQL block of docs/operations.md that opens
// with the comment line "-- side".
func operationsSQL(t *testing.T, side string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(doc), "```sql\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		if strings.HasPrefix(body, "-- "+side+"\n") {
			return body
		}
	}
	t.Fatalf("docs/operations.md has no sql block for the %s", side)
	return ""
}

// operationsDatabases makes, on both servers, the database app of
// docs/operations.md with schema shop and two tables, rows in them on the
// publisher, and returns superuser connections to them.
func operationsDatabases(t *testing.T, e *env) (pub, sub *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	const schema = `CREATE SCHEMA shop;
		CREATE TABLE shop.orders (id bigserial PRIMARY KEY, customer int NOT NULL, total numeric(12,2));
		CREATE TABLE shop.notes (id int PRIMARY KEY, body text)`
	conns := map[string]*pgx.Conn{}
	for side, s := range map[string]interface{ DSN(string) string }{"publisher": e.pair.Publisher, "target": e.pair.Subscriber} {
		admin := map[string]*pgx.Conn{"publisher": e.pub, "target": e.sub}[side]
		e.exec(admin, "CREATE DATABASE app")
		c, err := pgx.Connect(ctx, s.DSN("app"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		e.exec(c, schema)
		conns[side] = c
	}
	pub, sub = conns["publisher"], conns["target"]
	e.exec(pub, `INSERT INTO shop.orders (customer, total) SELECT g % 7, g * 1.25 FROM generate_series(1, 500) g;
		INSERT INTO shop.notes SELECT g, 'note ' || g FROM generate_series(1, 50) g`)
	return pub, sub
}

// TestOperationsRoles: the least-privilege roles of docs/operations.md,
// made by its SQL as written, pass parapply check and run parapply: the
// copy, then inserts, updates, deletes, a truncate and sequences, the
// target equal to the publisher at the end.
func TestOperationsRoles(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	pub, sub := operationsDatabases(t, e)
	e.exec(pub, operationsSQL(t, "publisher"))
	e.exec(sub, operationsSQL(t, "target"))

	src := strings.Replace(e.pair.Publisher.DSN("app"), "user=postgres", "user=repl", 1)
	dst := strings.Replace(e.pair.Subscriber.DSN("app"), "user=postgres", "user=apply", 1)
	args := []string{"--source", src, "--target", dst, "--publication", "app_pub", "--slot", "app"}
	rep, code, out := runCheck(t, args...)
	if code != 0 {
		t.Fatalf("parapply check with the documented roles: exit status %d:\n%s", code, out)
	}
	for _, r := range rep.Results {
		// Warnings that need a standby or another setting of the
		// server: no part of the roles.
		if r.Status != "ok" && r.Check != "track_commit_timestamp" && r.Check != "failover slot" {
			t.Errorf("%s %s: %s %+v", r.Side, r.Check, r.Status, r.Problems)
		}
	}

	p := e.runProcess(t, append(args[:len(args):len(args)], "--sequence-sync-interval", "200ms")...)
	waitSlotActive(t, pub, "app", p)
	e.exec(pub, `INSERT INTO shop.orders (customer, total) SELECT g, g FROM generate_series(1, 100) g;
		UPDATE shop.orders SET total = total + 1 WHERE id % 10 = 0;
		DELETE FROM shop.orders WHERE id % 25 = 0;
		TRUNCATE shop.notes;
		INSERT INTO shop.notes VALUES (1, 'after the truncate')`)
	var want int64
	if err := pub.QueryRow(ctx, "SELECT last_value FROM shop.orders_id_seq").Scan(&want); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitCaughtUpFor)
	for {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		var seq int64
		var notes int
		_ = sub.QueryRow(ctx, "SELECT last_value FROM shop.orders_id_seq").Scan(&seq)
		_ = sub.QueryRow(ctx, "SELECT count(*) FROM shop.notes").Scan(&notes)
		if res, err := verify.Tables(ctx, pub, sub, "shop.orders", "shop.notes"); err == nil && seq == want && notes == 1 {
			for _, r := range res {
				t.Logf("%s: %d rows identical", r.Table, r.Rows)
			}
			break
		}
		if time.Now().After(deadline) {
			res, err := verify.Tables(ctx, pub, sub, "shop.orders", "shop.notes")
			t.Fatalf("the target did not reach the publisher: sequence %d of %d, %+v, %v", seq, want, res, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.signal(syscall.SIGTERM)
}

// waitSlotActive waits until a walsender streams from slot on conn's
// server, while p runs.
func waitSlotActive(t *testing.T, conn *pgx.Conn, slot string, p *proc) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		var active bool
		if err := conn.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err == nil && active {
			return
		}
	}
	t.Fatalf("slot %s never became active", slot)
}

// testCA makes a certificate authority and a certificate it signed for
// 127.0.0.1 and localhost; it returns the CA's certificate and the
// server's certificate and key, PEM-encoded.
func testCA(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "parapply test CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// serveTLS turns TLS on for a running server: the certificate and key in
// its data directory, owned by the server's user, and ssl = on reloaded.
func serveTLS(t *testing.T, conn *pgx.Conn, dataDir string, certPEM, keyPEM []byte) {
	t.Helper()
	fi, err := os.Stat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	for name, body := range map[string][]byte{"server.crt": certPEM, "server.key": keyPEM} {
		path := filepath.Join(dataDir, name)
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, sql := range []string{"ALTER SYSTEM SET ssl_cert_file = 'server.crt'", "ALTER SYSTEM SET ssl_key_file = 'server.key'", "ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// TestTLS: parapply connects to both servers with sslmode=verify-full
// (docs/operations.md), checks and applies over TLS, and refuses a server
// whose certificate it cannot verify.
func TestTLS(t *testing.T) {
	e := newEnv(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	ctx := context.Background()
	caPEM, certPEM, keyPEM := testCA(t)
	serveTLS(t, e.pub, e.pair.Publisher.DataDir, certPEM, keyPEM)
	serveTLS(t, e.sub, e.pair.Subscriber.DataDir, certPEM, keyPEM)
	dir := t.TempDir()
	caPath := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caPath, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	otherCA, _, _ := testCA(t)
	otherPath := filepath.Join(dir, "other.pem")
	if err := os.WriteFile(otherPath, otherCA, 0o644); err != nil {
		t.Fatal(err)
	}
	tls := func(dsn, ca string) string {
		return strings.Replace(dsn, "sslmode=disable", "sslmode=verify-full sslrootcert="+ca, 1)
	}
	src, dst := tls(e.sourceDSN(), caPath), tls(e.targetDSN(), caPath)
	e.exec(e.pub, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 100) g`)

	if _, code, out := runCheck(t, "--source", src, "--target", dst, "--publication", "pub", "--slot", "tls"); code != 0 {
		t.Fatalf("parapply check over TLS: exit status %d:\n%s", code, out)
	}
	_, code, out := runCheck(t, "--source", tls(e.sourceDSN(), otherPath), "--target", dst, "--publication", "pub", "--slot", "tls")
	if code == 0 || !strings.Contains(out, "certificate") {
		t.Errorf("parapply check with a CA that did not sign the publisher's certificate: exit status %d, want a certificate error:\n%s", code, out)
	}

	p := e.runProcess(t, "--source", src, "--target", dst, "--publication", "pub", "--slot", "tls")
	e.waitSlotExists(t, "tls", p)
	e.exec(e.pub, `UPDATE items SET v = v || '!' WHERE id % 3 = 0; DELETE FROM items WHERE id > 90; INSERT INTO items VALUES (500, 'late')`)
	e.waitSlotConfirmed("tls", waitCaughtUpFor, p.alive)
	var walsenders, appliers int
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.backend_type = 'walsender' AND s.ssl`).Scan(&walsenders); err != nil {
		t.Fatal(err)
	}
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name LIKE 'parapply%' AND s.ssl`).Scan(&appliers); err != nil {
		t.Fatal(err)
	}
	if walsenders == 0 || appliers == 0 {
		t.Errorf("sessions over TLS: %d walsenders on the publisher, %d of parapply's on the target; want both above 0", walsenders, appliers)
	}
	p.signal(syscall.SIGTERM)
	e.verify("items")
}
