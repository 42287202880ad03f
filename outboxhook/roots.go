package outboxhook

import (
	"fmt"
	"reflect"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/aggregate"
	"github.com/heraldgo/herald/internal/recorded"
)

// rootRef is an aggregate found in a statement's model or destination.
type rootRef struct {
	root   *aggregate.Root
	list   *recorded.List // root's events
	model  any            // pointer to the model that embeds root
	value  reflect.Value  // the model struct
	schema *schema.Schema
}

// serialize reports whether writers of this aggregate's events must be
// serialized by a lock: its type or id is not (only) its row's, so two
// transactions can write its events without touching one common row, whose lock
// would otherwise order them.
func (r rootRef) serialize() bool {
	_, typed := r.model.(aggregate.Typed)
	_, identified := r.model.(aggregate.Identified)
	return typed || identified
}

var aggregateType = reflect.TypeFor[aggregate.Aggregate]()

// collectRoots finds the aggregates, with or without pending events, in the
// statement's Model and Dest: a pointer to a struct, or a slice or array of
// structs or pointers. An aggregate passed by value cannot be told that its
// events were written: if it has pending events, the statement fails with
// ErrAggregateByValue (so does one with pending cancels or moves).
func collectRoots(st *gorm.Statement) ([]rootRef, error) {
	var (
		out   []rootRef
		byVal error
	)
	seen := map[*aggregate.Root]bool{}
	visit := func(v reflect.Value) {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct || !reflect.PointerTo(v.Type()).Implements(aggregateType) {
			return
		}
		if !v.CanAddr() {
			cp := reflect.New(v.Type())
			cp.Elem().Set(v)
			if n := len(recorded.Of(cp.Interface().(aggregate.Aggregate).AggregateRoot()).Pending()); n > 0 && byVal == nil {
				byVal = fmt.Errorf("%w: %s with %d pending events, cancels or moves", ErrAggregateByValue, v.Type(), n)
			}
			return
		}
		agg := v.Addr().Interface().(aggregate.Aggregate)
		r := agg.AggregateRoot()
		if r == nil || seen[r] {
			return
		}
		seen[r] = true
		out = append(out, rootRef{root: r, list: recorded.Of(r), model: agg, value: v})
	}
	for _, x := range []any{st.Model, st.Dest} {
		if x == nil {
			continue
		}
		v := reflect.ValueOf(x)
		for v.Kind() == reflect.Pointer && !v.IsNil() && (v.Elem().Kind() == reflect.Pointer || v.Elem().Kind() == reflect.Slice || v.Elem().Kind() == reflect.Array) {
			v = v.Elem()
		}
		switch v.Kind() {
		case reflect.Slice, reflect.Array:
			if !ptrOrStructElems(v.Type().Elem()) {
				continue
			}
			for i := 0; i < v.Len(); i++ {
				visit(v.Index(i))
			}
		default:
			visit(v)
		}
	}
	if byVal != nil {
		return nil, byVal
	}
	for i := range out {
		if st.Schema != nil && out[i].value.Type() == st.Schema.ModelType {
			out[i].schema = st.Schema
		}
	}
	return out, nil
}

func ptrOrStructElems(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Interface
}

func (p *Plugin) schemaOf(db *gorm.DB, r rootRef) (*schema.Schema, error) {
	if r.schema != nil {
		return r.schema, nil
	}
	st := &gorm.Statement{DB: db}
	if err := st.Parse(r.model); err != nil {
		return nil, fmt.Errorf("outboxhook: parse %T: %w", r.model, err)
	}
	return st.Schema, nil
}

// checkIDAvailable fails before the write when an aggregate has no id and its
// write will not produce one (a zero primary key without a database default).
func (p *Plugin) checkIDAvailable(db *gorm.DB, r rootRef) error {
	if _, ok := r.model.(aggregate.Identified); ok {
		return nil // the model's own id is checked at write time
	}
	s, err := p.schemaOf(db, r)
	if err != nil {
		return err
	}
	if len(s.PrimaryFields) == 0 {
		return fmt.Errorf("%w: %T has no primary key (implement aggregate.Identified)", ErrEmptyAggregateID, r.model)
	}
	for _, f := range s.PrimaryFields {
		if _, zero := f.ValueOf(db.Statement.Context, r.value); zero && !f.HasDefaultValue && !f.AutoIncrement {
			return fmt.Errorf("%w: %T has a zero %s and no database default", ErrEmptyAggregateID, r.model, f.Name)
		}
	}
	return nil
}

// identify returns the aggregate type and id of r, after its row was written.
func (p *Plugin) identify(db *gorm.DB, r rootRef) (string, string, error) {
	var typ, id string
	if t, ok := r.model.(aggregate.Typed); ok {
		typ = t.AggregateType()
	}
	if i, ok := r.model.(aggregate.Identified); ok {
		if id = i.AggregateID(); id == "" {
			return "", "", fmt.Errorf("%w: %T.AggregateID() returned \"\"", ErrEmptyAggregateID, r.model)
		}
	}
	if typ == "" || id == "" {
		s, err := p.schemaOf(db, r)
		if err != nil {
			return "", "", err
		}
		if typ == "" {
			typ = s.Name
		}
		if id == "" {
			parts := make([]string, 0, len(s.PrimaryFields))
			for _, f := range s.PrimaryFields {
				v, zero := f.ValueOf(db.Statement.Context, r.value)
				if zero {
					parts = nil
					break
				}
				parts = append(parts, fmt.Sprint(v))
			}
			id = strings.Join(parts, ":")
		}
	}
	if id == "" {
		return "", "", fmt.Errorf("%w: %T (%s)", ErrEmptyAggregateID, r.model, typ)
	}
	return typ, id, nil
}
