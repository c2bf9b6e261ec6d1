package clusterapi

import (
	"strings"
)

// normalizeProviderID makes provider IDs that name the same instance compare
// equal. Providers are not consistent about empty path segments: a Node may
// say "aws:///us-east-1a/i-0abc" where the Machine says "aws://us-east-1a/i-0abc".
func normalizeProviderID(providerID string) string {
	scheme, path, found := strings.Cut(providerID, "://")
	if !found {
		return joinNonEmpty(providerID)
	}
	return strings.ToLower(scheme) + "://" + joinNonEmpty(path)
}

func joinNonEmpty(path string) string {
	segments := strings.Split(path, "/")
	kept := segments[:0]
	for _, segment := range segments {
		if segment != "" {
			kept = append(kept, segment)
		}
	}
	return strings.Join(kept, "/")
}
