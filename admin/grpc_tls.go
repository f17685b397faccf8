package main

import (
	"errors"
	"flag"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// grpcTLSFlags declares the flags of TLS on the xDS and rate limit service
// ports; the returned function checks them once parsed.
func (o *options) grpcTLSFlags(fs *flag.FlagSet) func() error {
	f := &o.GRPCTLS
	fs.StringVar(&f.Cert, "grpc-tls-cert", env("SLUICE_GRPC_TLS_CERT", ""), "serve xDS and the rate limit service over TLS with this certificate (PEM; read again when the file changes) (SLUICE_GRPC_TLS_CERT)")
	fs.StringVar(&f.Key, "grpc-tls-key", env("SLUICE_GRPC_TLS_KEY", ""), "and this private key (PEM) (SLUICE_GRPC_TLS_KEY)")
	fs.StringVar(&f.ClientCA, "grpc-client-ca", env("SLUICE_GRPC_CLIENT_CA", ""), "require Envoys to present a certificate signed by this CA (PEM) on those ports: mutual TLS (SLUICE_GRPC_CLIENT_CA)")
	return func() error {
		switch {
		case (f.Cert == "") != (f.Key == ""):
			return errors.New("-grpc-tls-cert and -grpc-tls-key go together")
		case f.ClientCA != "" && f.Cert == "":
			return errors.New("-grpc-client-ca: needs -grpc-tls-cert and -grpc-tls-key (mutual TLS is TLS first)")
		case f.Cert == "":
			return nil
		}
		_, err := f.Config()
		if err != nil {
			return fmt.Errorf("-grpc-tls-cert/-grpc-tls-key/-grpc-client-ca: %w", err)
		}
		return nil
	}
}

// grpcServerOptions are the options of the xDS and rate limit service
// servers: TLS credentials when configured, else none (plaintext HTTP/2).
func (o *options) grpcServerOptions() ([]grpc.ServerOption, error) {
	if o.GRPCTLS.Cert == "" {
		return nil, nil
	}
	cfg, err := o.GRPCTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("-grpc-tls-cert: %w", err)
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, nil
}
