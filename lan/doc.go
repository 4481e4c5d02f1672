// Package lan is agentd's zero-configuration LAN discovery.
package lan
