module github.com/agentd/agentd/scripts/wakeups

go 1.26

require golang.org/x/exp v0.0.0-20260718201538-764159d718ef
