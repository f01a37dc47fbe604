package pigeon

// Temporary stand-in; replaced by the CEL environment.

import "github.com/google/cel-go/cel"

type condition struct {
	src string
	prg cel.Program
}

type celPrincipal struct {
	ID         string
	Attributes map[string]string
	Roles      []string
}

type celMessage struct {
	ID, Type, Source, Subject, Intent, Region, Reason, Classification string
	Data                                                              any
}

var celEnv, _ = cel.NewEnv(cel.Variable("principal", cel.DynType), cel.Variable("message", cel.DynType))

func compileCondition(expr string) (*condition, error) {
	ast, iss := celEnv.Compile(expr)
	if iss.Err() != nil {
		return nil, NewError(CodePolicyInvalid, "%v", iss.Err())
	}
	prg, err := celEnv.Program(ast)
	if err != nil {
		return nil, err
	}
	return &condition{src: expr, prg: prg}, nil
}

func (c *condition) eval(p celPrincipal, m celMessage) (bool, error) {
	roles := make([]any, len(p.Roles))
	for i, r := range p.Roles {
		roles[i] = r
	}
	out, _, err := c.prg.Eval(map[string]any{
		"principal": map[string]any{"id": p.ID, "attributes": p.Attributes, "roles": roles},
		"message":   map[string]any{"data": m.Data, "region": m.Region, "reason": m.Reason, "intent": m.Intent},
	})
	if err != nil {
		return false, err
	}
	b, _ := out.Value().(bool)
	return b, nil
}
