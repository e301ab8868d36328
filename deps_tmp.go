//go:build tools

package main

import (
	_ "github.com/VictoriaMetrics/metrics"
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/redis/rueidis"
	_ "github.com/valyala/fasthttp"
	_ "github.com/valyala/fastjson"
	_ "gopkg.in/yaml.v3"
)

func main() {}
