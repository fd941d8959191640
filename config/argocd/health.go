// Package argocd holds what Argo CD is given to judge InPlaceRollout objects, and the StatefulSets
// and DaemonSets under an InPlaceRolloutPolicy: the Lua health checks (health.lua and
// workload.lua, in Argo CD's resource customization format), which Health and WorkloadHealth run with
// gopher-lua, the interpreter Argo CD embeds, so that tests judge real objects as Argo CD would.
// Flux's kstatus reads the same objects' conditions.
package argocd

import (
	_ "embed"
	"fmt"

	lua "github.com/yuin/gopher-lua"
)

// HealthScript is health.lua.
//
//go:embed health.lua
var HealthScript string

// WorkloadHealthScript is workload.lua: the health of a StatefulSet or DaemonSet, under an
// InPlaceRolloutPolicy or not.
//
//go:embed workload.lua
var WorkloadHealthScript string

// WorkloadHealth runs WorkloadHealthScript as Argo CD does, on obj (a StatefulSet or DaemonSet
// as JSON decodes it).
func WorkloadHealth(obj map[string]any) (health, message string, err error) {
	return run(WorkloadHealthScript, obj)
}

// Health runs HealthScript as Argo CD does, on obj (an InPlaceRollout as JSON decodes it): the
// health status (Healthy, Progressing, Suspended, Degraded) and message it returns.
func Health(obj map[string]any) (health, message string, err error) {
	return run(HealthScript, obj)
}

// run runs script with obj as the global obj, and returns the returned table's status and
// message. Argo CD opens the same libraries: package, base, table, string.
func run(script string, obj map[string]any) (health, message string, err error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return "", "", fmt.Errorf("running the health check: %w", err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the health check returned %s, want a table", L.Get(-1).Type())
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message")), nil
}

// toLua is a JSON-shaped value as a Lua value: objects and arrays as tables (arrays from 1).
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		tb := L.NewTable()
		for k, x := range v {
			tb.RawSetString(k, toLua(L, x))
		}
		return tb
	case []any:
		tb := L.NewTable()
		for i, x := range v {
			tb.RawSetInt(i+1, toLua(L, x))
		}
		return tb
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	}
	return lua.LNil
}
