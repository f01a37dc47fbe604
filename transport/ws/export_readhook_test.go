package ws

// WithReadHook returns a copy of o (nil: the defaults) whose server calls
// fn on the read loop with a frame as it settles a push delivery with it
// and once it has counted it as an op, before a worker takes it (see
// Options.readHook): a test's fn panics there.
func WithReadHook(o *Options, fn func(*Frame)) *Options {
	var c Options
	if o != nil {
		c = *o
	}
	c.readHook = fn
	return &c
}
