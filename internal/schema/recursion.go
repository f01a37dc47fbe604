package schema

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrRecursion is the error of a schema whose $ref recursion would make
// gojsonschema's work grow faster than the data: exponentially in the
// data's nesting, or without end. Compile wraps it with the schema paths.
var ErrRecursion = errors.New("schema: recursion the validator cannot bound")

// maxRecursionPairs bounds the pairs of schema nodes checkRecursion
// explores in one recursive part of a schema; a schema beyond it is
// refused rather than checked for longer than compiling it takes.
const maxRecursionPairs = 1 << 20

// checkRecursion refuses a schema under which one message could cost
// gojsonschema time exponential in its nesting, or endless time.
//
// gojsonschema validates a value against every subschema that applies to
// it, all branches of anyOf, oneOf and allOf, not, if, then, else and
// dependencies, without sharing work between them. When a $ref cycle
// leads from a subschema back to itself in two ways that one path into
// the data can take (two anyOf branches each with items: {$ref}, or
// properties and patternProperties that match one member), each level of
// nesting doubles the work: 2^64 validations for data 64 levels deep, in
// a message of a few hundred bytes. That is the automaton question of
// exponential ambiguity: the schema is a graph whose edges either stay on
// the same value (combinators, $ref) or step to a child value with a
// label (a member name or pattern, an item index); the work is
// exponential exactly when some node reaches itself by two distinct walks
// whose labels one data path can match step by step. Recursion without
// such a choice (a tree whose nodes hold items: {$ref}, or properties
// left and right, both {$ref}) costs one validation per data value and
// stays allowed. Nor may one data path both stay in a recursion and
// leave it for another at any level (ambiguousExit): a chain of k such
// recursions costs 64^k validations or so. A $ref cycle that never steps
// into the data would recurse until the stack is exhausted, which kills
// the process.
//
// $ref is followed within the document as gojsonschema follows it: "#"
// and "#/…" pointers from the document's root, and "#name" to the
// subschema whose $id is "#name". A $ref that leaves the document is not
// followed (the policy linter refuses it).
func checkRecursion(doc any) error {
	g := &recGraph{doc: doc, ids: map[string]int{}, anchors: map[string]int{}}
	g.walk(doc, "")
	for i := 0; i < len(g.refs); i++ { // resolve may walk more, with $refs of its own
		r := g.refs[i]
		if to, ok := g.resolve(r.ref); ok {
			g.nodes[r.from].eps = append(g.nodes[r.from].eps, to)
		}
	}
	if err := g.epsilonCycle(); err != nil {
		return err
	}
	return g.ambiguity()
}

type recNode struct {
	ptr   string
	eps   []int     // subschemas of the same value: combinators, $ref
	kids  []recEdge // subschemas of a child value
	props map[string]bool
	pats  []*regexp.Regexp // nil entry: a pattern Go does not compile
}

// recEdge steps to the child value kind names: 'm' a member (name, or
// pattern when pat, or additionalProperties when addl), 'i' an item (idx,
// or every index >= from when idx < 0), 'n' a member name.
type recEdge struct {
	kind        byte
	name        string
	pat         *regexp.Regexp
	isPat, addl bool
	idx, from   int
	to          int
}

type recGraph struct {
	doc   any
	nodes []recNode
	ids   map[string]int // JSON pointer (escaped) to node
	// anchors are the nodes whose $id (or id) is a fragment such as
	// "#item", by it: gojsonschema resolves a $ref "#item" to them.
	anchors map[string]int
	refs    []struct {
		from int
		ref  string
	}
}

func escapeToken(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// walk adds the schema v at ptr and its subschemas; it returns v's node.
func (g *recGraph) walk(v any, ptr string) int {
	if id, ok := g.ids[ptr]; ok {
		return id
	}
	id := len(g.nodes)
	g.nodes = append(g.nodes, recNode{ptr: ptr})
	g.ids[ptr] = id
	m, ok := v.(map[string]any)
	if !ok {
		return id // true, false, or not a schema
	}
	for _, k := range []string{"$id", "id"} {
		if a, ok := m[k].(string); ok && strings.HasPrefix(a, "#") && !strings.HasPrefix(a, "#/") {
			if _, dup := g.anchors[a]; !dup {
				g.anchors[a] = id
			}
		}
	}
	at := func(k string) string { return ptr + "/" + escapeToken(k) }
	sub := func(k string, x any) int { return g.walk(x, at(k)) }
	for _, k := range []string{"definitions", "$defs"} {
		if defs, ok := m[k].(map[string]any); ok {
			for _, name := range slices.Sorted(maps.Keys(defs)) {
				d := defs[name]
				g.walk(d, at(k)+"/"+escapeToken(name))
			}
		}
	}
	if ref, ok := m["$ref"].(string); ok {
		// gojsonschema reads nothing beside a $ref.
		g.refs = append(g.refs, struct {
			from int
			ref  string
		}{id, ref})
		return id
	}
	var eps []int
	var kids []recEdge
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if arr, ok := m[k].([]any); ok {
			for i, x := range arr {
				eps = append(eps, g.walk(x, at(k)+"/"+strconv.Itoa(i)))
			}
		}
	}
	for _, k := range []string{"not", "if", "then", "else"} {
		if x, ok := m[k]; ok {
			eps = append(eps, sub(k, x))
		}
	}
	for _, k := range []string{"dependencies", "dependentSchemas"} {
		if deps, ok := m[k].(map[string]any); ok {
			for _, name := range slices.Sorted(maps.Keys(deps)) {
				x := deps[name]
				if _, list := x.([]any); !list {
					eps = append(eps, g.walk(x, at(k)+"/"+escapeToken(name)))
				}
			}
		}
	}
	props := map[string]bool{}
	if pm, ok := m["properties"].(map[string]any); ok {
		for _, name := range slices.Sorted(maps.Keys(pm)) {
			x := pm[name]
			props[name] = true
			kids = append(kids, recEdge{kind: 'm', name: name, to: g.walk(x, at("properties")+"/"+escapeToken(name))})
		}
	}
	var pats []*regexp.Regexp
	if pm, ok := m["patternProperties"].(map[string]any); ok {
		for _, p := range slices.Sorted(maps.Keys(pm)) {
			x := pm[p]
			re, _ := regexp.Compile(p)
			pats = append(pats, re)
			kids = append(kids, recEdge{kind: 'm', pat: re, isPat: true, to: g.walk(x, at("patternProperties")+"/"+escapeToken(p))})
		}
	}
	if x, ok := m["additionalProperties"]; ok {
		kids = append(kids, recEdge{kind: 'm', addl: true, to: sub("additionalProperties", x)})
	}
	if x, ok := m["propertyNames"]; ok {
		kids = append(kids, recEdge{kind: 'n', to: sub("propertyNames", x)})
	}
	switch items := m["items"].(type) {
	case []any:
		for i, x := range items {
			kids = append(kids, recEdge{kind: 'i', idx: i, to: g.walk(x, at("items")+"/"+strconv.Itoa(i))})
		}
		if x, ok := m["additionalItems"]; ok {
			kids = append(kids, recEdge{kind: 'i', idx: -1, from: len(items), to: sub("additionalItems", x)})
		}
	case nil:
	default:
		kids = append(kids, recEdge{kind: 'i', idx: -1, to: sub("items", items)})
	}
	if x, ok := m["contains"]; ok {
		kids = append(kids, recEdge{kind: 'i', idx: -1, to: sub("contains", x)})
	}
	n := &g.nodes[id]
	n.eps, n.kids, n.props, n.pats = eps, kids, props, pats
	return id
}

// resolve finds the node of a $ref within the document.
func (g *recGraph) resolve(ref string) (int, bool) {
	if id, ok := g.anchors[ref]; ok {
		return id, true
	}
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return 0, false
	}
	frag, err := url.PathUnescape(frag)
	if err != nil || frag != "" && frag[0] != '/' {
		return 0, false
	}
	v, ptr := g.doc, ""
	if frag != "" {
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch x := v.(type) {
			case map[string]any:
				if v, ok = x[tok]; !ok {
					return 0, false
				}
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(x) {
					return 0, false
				}
				v, tok = x[i], strconv.Itoa(i)
			default:
				return 0, false
			}
			ptr += "/" + escapeToken(tok)
		}
	}
	return g.walk(v, ptr), true
}

func (g *recGraph) path(id int) string { return "#" + g.nodes[id].ptr }

// epsilonCycle refuses a cycle of $refs and combinators that never steps
// into the data.
func (g *recGraph) epsilonCycle() error {
	state := make([]uint8, len(g.nodes)) // 0 new, 1 on the stack, 2 done
	var visit func(int) error
	visit = func(u int) error {
		state[u] = 1
		for _, v := range g.nodes[u].eps {
			switch state[v] {
			case 1:
				return fmt.Errorf("%w: %s leads back to %s without descending into the data, so validating would never end",
					ErrRecursion, g.path(u), g.path(v))
			case 0:
				if err := visit(v); err != nil {
					return err
				}
			}
		}
		state[u] = 2
		return nil
	}
	for u := range g.nodes {
		if state[u] == 0 {
			if err := visit(u); err != nil {
				return err
			}
		}
	}
	return nil
}

// step is an edge of the schema graph with the same-value moves taken
// out: from a node, through same-value subschemas (in mult ways, counted
// up to 2), to src, then by src's child edge kid.
type step struct {
	src, kid, to int
	mult         uint8
}

// closure counts the same-value walks from u to each node, up to 2.
func (g *recGraph) closure(u int, memo map[int]map[int]uint8) map[int]uint8 {
	if c, ok := memo[u]; ok {
		return c
	}
	c := map[int]uint8{u: 1}
	for _, v := range g.nodes[u].eps {
		for w, n := range g.closure(v, memo) {
			c[w] = min(c[w]+n, 2)
		}
	}
	memo[u] = c
	return c
}

// overlap reports whether one child value can be reached by both edges.
func (g *recGraph) overlap(a, b step) bool {
	x, y := g.nodes[a.src].kids[a.kid], g.nodes[b.src].kids[b.kid]
	if x.kind != y.kind {
		return false
	}
	switch x.kind {
	case 'i':
		switch {
		case x.idx >= 0 && y.idx >= 0:
			return x.idx == y.idx
		case x.idx >= 0:
			return x.idx >= y.from
		case y.idx >= 0:
			return y.idx >= x.from
		}
		return true
	case 'm':
		if y.isPat || y.addl {
			x, y = y, x
			a, b = b, a
		}
		// x is the wider: a pattern or additionalProperties.
		switch {
		case x.addl && y.addl:
			return true
		case x.addl && y.isPat:
			return a.src != b.src
		case x.addl:
			n := g.nodes[a.src]
			return !n.props[y.name] && !slices.ContainsFunc(n.pats, func(re *regexp.Regexp) bool { return re != nil && re.MatchString(y.name) })
		case x.isPat && y.isPat:
			return true
		case x.isPat:
			return x.pat == nil || x.pat.MatchString(y.name)
		}
		return x.name == y.name
	}
	return true
}

// ambiguity refuses a node that reaches itself by two distinct walks one
// data path can take: within a strongly connected part of the graph of
// steps, it looks for a cycle through a pair (p, p) of the product graph
// that takes a pair of distinct steps.
func (g *recGraph) ambiguity() error {
	memo := map[int]map[int]uint8{}
	out := make([][]step, len(g.nodes))
	for u := range g.nodes {
		for p, n := range g.closure(u, memo) {
			for k, e := range g.nodes[p].kids {
				out[u] = append(out[u], step{src: p, kid: k, to: e.to, mult: n})
			}
		}
		slices.SortFunc(out[u], func(a, b step) int { return cmp.Or(cmp.Compare(a.src, b.src), cmp.Compare(a.kid, b.kid)) })
	}
	comp := components(len(g.nodes), func(u int) []int {
		var to []int
		for _, s := range out[u] {
			to = append(to, s.to)
		}
		return to
	})
	parts := map[int][]int{}
	for u, c := range comp {
		parts[c] = append(parts[c], u)
	}
	keys := make([]int, 0, len(parts))
	for c := range parts {
		keys = append(keys, c)
	}
	slices.Sort(keys)
	for _, c := range keys {
		if err := g.ambiguousPart(parts[c], comp, out); err != nil {
			return err
		}
	}
	cyclic := map[int]bool{}
	for u := range g.nodes {
		for _, s := range out[u] {
			if comp[s.to] == comp[u] {
				cyclic[comp[u]] = true
			}
		}
	}
	for _, c := range keys {
		if cyclic[c] {
			if err := g.ambiguousExit(parts[c], comp, out, cyclic); err != nil {
				return err
			}
		}
	}
	return nil
}

// ambiguousExit refuses a recursion (part, a strongly connected part of
// the graph of steps) that one data path can both stay in and leave for
// another recursion at the same level: the walks then number one for each
// level the data could leave at, and a chain of k such recursions costs
// time that grows with the data's nesting to the power k (64^k validations
// for data 64 levels deep). It looks, in the product graph, for a pair
// (a, b) reached from a pair (p, p) of part with a in part and b in
// another recursion. Recursions entered by a member or item of their own
// (a tree whose leaves hold another tree) stay allowed.
func (g *recGraph) ambiguousExit(part, comp []int, out [][]step, cyclic map[int]bool) error {
	n, all := len(part), len(g.nodes)
	if n*all > maxRecursionPairs {
		return fmt.Errorf("%w: the recursion through %s is too large to check", ErrRecursion, g.path(part[0]))
	}
	home := comp[part[0]]
	seen := map[[2]int]bool{}
	var queue [][2]int
	for _, p := range part {
		seen[[2]int{p, p}] = true
		queue = append(queue, [2]int{p, p})
	}
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		for _, a := range out[x[0]] {
			if comp[a.to] != home {
				continue
			}
			for _, b := range out[x[1]] {
				if !g.overlap(a, b) {
					continue
				}
				if c := comp[b.to]; c != home && cyclic[c] {
					return fmt.Errorf("%w: the recursion through %s and the one through %s can both take the same data at every level, "+
						"so validating costs time that grows with a power of the data's nesting; "+
						"let each recursion descend into a member or item of its own, or drop the combinator around the $ref",
						ErrRecursion, g.path(a.to), g.path(b.to))
				}
				y := [2]int{a.to, b.to}
				if !seen[y] {
					seen[y] = true
					queue = append(queue, y)
				}
			}
		}
	}
	return nil
}

func (g *recGraph) ambiguousPart(part, comp []int, out [][]step) error {
	n := len(part)
	if n*n > maxRecursionPairs {
		return fmt.Errorf("%w: the recursion through %s is too large to check", ErrRecursion, g.path(part[0]))
	}
	local := map[int]int{}
	for i, u := range part {
		local[u] = i
	}
	inPart := func(s step) bool { return comp[s.to] == comp[part[0]] }
	type pedge struct {
		to       int
		distinct bool
		a, b     step
	}
	edges := map[int][]pedge{}
	succ := func(x int) []pedge {
		if e, ok := edges[x]; ok {
			return e
		}
		var es []pedge
		for _, a := range out[part[x/n]] {
			if !inPart(a) {
				continue
			}
			for _, b := range out[part[x%n]] {
				if !inPart(b) || !g.overlap(a, b) {
					continue
				}
				same := a.src == b.src && a.kid == b.kid
				es = append(es, pedge{to: local[a.to]*n + local[b.to], distinct: !same || a.mult > 1, a: a, b: b})
			}
		}
		edges[x] = es
		return es
	}
	pc := components(n*n, func(x int) []int {
		var to []int
		for _, e := range succ(x) {
			to = append(to, e.to)
		}
		return to
	})
	diagonal := map[int]int{} // product component holding a pair (p, p): p
	for i := range n {
		diagonal[pc[i*n+i]] = part[i]
	}
	for x := range n * n {
		p, ok := diagonal[pc[x]]
		if !ok {
			continue
		}
		for _, e := range succ(x) {
			if e.distinct && pc[e.to] == pc[x] {
				a := g.path(g.nodes[e.a.src].kids[e.a.kid].to)
				b := g.path(g.nodes[e.b.src].kids[e.b.kid].to)
				how := a + " and " + b
				if a == b {
					how = a + " by more than one way through combinators"
				}
				return fmt.Errorf("%w: %s recurses to itself through %s for the same data, "+
					"so validating costs time exponential in the data's nesting; "+
					"let each recursive branch descend into a different member or item, or drop the combinator around the $ref",
					ErrRecursion, g.path(p), how)
			}
		}
	}
	return nil
}

// components numbers the strongly connected components of the graph of
// n nodes with the successors succ (Tarjan's algorithm, iterative).
func components(n int, succ func(int) []int) []int {
	index := make([]int, n)
	low := make([]int, n)
	comp := make([]int, n)
	for i := range index {
		index[i], comp[i] = -1, -1
	}
	var stack []int
	onStack := make([]bool, n)
	next, ncomp := 0, 0
	type frame struct {
		u    int
		succ []int
		i    int
	}
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		calls := []frame{{u: root, succ: succ(root)}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			if f.i < len(f.succ) {
				v := f.succ[f.i]
				f.i++
				if index[v] < 0 {
					index[v], low[v] = next, next
					next++
					stack = append(stack, v)
					onStack[v] = true
					calls = append(calls, frame{u: v, succ: succ(v)})
				} else if onStack[v] {
					low[f.u] = min(low[f.u], index[v])
				}
				continue
			}
			u := f.u
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				p := calls[len(calls)-1].u
				low[p] = min(low[p], low[u])
			}
			if low[u] == index[u] {
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = ncomp
					if w == u {
						break
					}
				}
				ncomp++
			}
		}
	}
	return comp
}
