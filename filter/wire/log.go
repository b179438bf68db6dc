package wire

// LogLevel is a log level as Envoy numbers them (spdlog's), which both of
// the proxy's ABIs take as they are: proxy-wasm's proxy_log_level_t and
// the dynamic modules' envoy_dynamic_module_type_log_level. It is the one
// log-level type of the filter: the core's Host (filter/plugin), the
// proxy-wasm layer (filter/abi) and the dynamic-module layer
// (filter/dynmod) all log with it.
type LogLevel uint32

// Log levels, as Envoy numbers them. The filter logs per request only at
// LogDebug.
const (
	LogTrace    LogLevel = 0
	LogDebug    LogLevel = 1
	LogInfo     LogLevel = 2
	LogWarn     LogLevel = 3
	LogError    LogLevel = 4
	LogCritical LogLevel = 5
)
