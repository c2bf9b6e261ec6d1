package view

import (
	"testing"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
)

func TestMain(m *testing.M) {
	plugintest.Main(m, NewStatusCommand, NewExplainCommand, NewTopCommand)
}
