// Package xdstest is an xDS client for tests of the admin's xDS server.
package xdstest

import (
	"context"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// FirstVersion opens an ADS stream to addr with creds, as node, asks for
// the resource of typeURL named name, and returns the version of the
// first response, or the error (within 5 s).
func FirstVersion(addr string, creds credentials.TransportCredentials, node, typeURL, name string) (string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err == nil {
		err = stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: typeURL, ResourceNames: []string{name}})
	}
	if err != nil {
		return "", err
	}
	resp, err := stream.Recv()
	return resp.GetVersionInfo(), err
}
