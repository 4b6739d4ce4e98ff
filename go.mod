module github.com/throttled/throttled

go 1.26

require (
	github.com/hashicorp/go-hclog v1.6.3
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/fatih/color v1.13.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	golang.org/x/sys v0.0.0-20220503163025-988cb79eb6c6 // indirect
	golang.org/x/text v0.41.0 // indirect
)
