package config

// Environment variables that override the defaults and the configuration
// file (and are overridden by command-line flags). The command line reads
// them through its flags; they are listed here so every part of agentd and
// its documentation uses the same names.
//
// Lists (AGENTD_LISTEN, AGENTD_BOOTSTRAP, AGENTD_ANNOUNCE) are comma-separated; booleans
// accept 1/0, true/false.
const (
	EnvConfig        = "AGENTD_CONFIG"          // path of the YAML configuration file
	EnvDataDir       = "AGENTD_DATA_DIR"        // dataDir
	EnvListen        = "AGENTD_LISTEN"          // listen (comma-separated multiaddrs)
	EnvAPI           = "AGENTD_API"             // api.addr
	EnvBootstrap     = "AGENTD_BOOTSTRAP"       // discovery.dht.bootstrapNodes (comma-separated multiaddrs)
	EnvLogLevel      = "AGENTD_LOG_LEVEL"       // log.level
	EnvLogFormat     = "AGENTD_LOG_FORMAT"      // log.format
	EnvTrustPolicy   = "AGENTD_TRUST_POLICY"    // trust.policy
	EnvNoLAN         = "AGENTD_NO_LAN"          // true turns discovery.udp.enabled and discovery.mdns.enabled off
	EnvLANInterface  = "AGENTD_LAN_INTERFACE"   // discovery.interface
	EnvClientMode    = "AGENTD_CLIENT_MODE"     // discovery.dht.clientMode
	EnvServeRegistry = "AGENTD_SERVE_REGISTRY"  // api.serveRegistry
	EnvMinFree       = "AGENTD_MIN_FREE"        // storage.minFree
	EnvScope         = "AGENTD_SCOPE"           // discovery.scope
	EnvDHTMode       = "AGENTD_DHT_MODE"        // discovery.dht.mode
	EnvReachability  = "AGENTD_REACHABILITY"    // nat.reachability
	EnvAnnounce      = "AGENTD_ANNOUNCE"        // nat.announce (comma-separated multiaddrs)
	EnvNoPortMapping = "AGENTD_NO_PORT_MAPPING" // true turns nat.portMapping off
	EnvAgentCard     = "AGENTD_AGENT_CARD"      // api.agentCard
)

// EnvVars lists every environment variable agentd reads for its
// configuration, in documentation order.
var EnvVars = []string{
	EnvConfig, EnvDataDir, EnvListen, EnvAPI, EnvBootstrap, EnvLogLevel,
	EnvLogFormat, EnvTrustPolicy, EnvNoLAN, EnvLANInterface, EnvClientMode,
	EnvServeRegistry, EnvMinFree, EnvScope, EnvDHTMode, EnvReachability,
	EnvAnnounce, EnvNoPortMapping, EnvAgentCard,
}
