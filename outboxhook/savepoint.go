package outboxhook

import (
	"database/sql"
	"runtime"
	"strings"
	"sync"
	"weak"
)

// The statements a transaction runs are followed (txn.ran) for the savepoints
// they set, release and roll back to. The recogniser below reads the plain
// spellings every supported database accepts; whatever it does not read
// exactly and may roll back (any statement that mentions ROLLBACK, a CALL or
// EXECUTE, which may run one) puts the transaction in doubt, which its commit
// resolves by looking its outbox rows up. So a spelling it misses costs a
// query, never an event.

type spOp uint8

const (
	spNone     spOp = iota
	spSet           // SAVEPOINT name
	spRollback      // ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name
	spRelease       // RELEASE [SAVEPOINT] name
)

// savepointStmt is what a statement does to savepoints.
type savepointStmt struct {
	op spOp
	// name is the savepoint's name as the database compares it: an unquoted
	// name in lower case (PostgreSQL folds it so; MySQL and SQLite compare
	// names without regard to case, so a name that differs only in case is
	// not matched, which puts the transaction in doubt, never wrong); a
	// quoted one ("name" or `name`) as written.
	name string
	// mayRollBack: the statement may undo writes of the transaction and is
	// not read exactly (op is spNone).
	mayRollBack bool
}

// parseStatement reads what query does to savepoints.
func parseStatement(query string) savepointStmt {
	l := lexer{q: query}
	l.skip()
	if l.i < len(l.q) {
		switch l.q[l.i] | 0x20 {
		case 's', 'r':
			if s, ok := l.savepointStmt(); ok {
				return s
			}
		}
	}
	return savepointStmt{mayRollBack: containsFold(query, "rollback") ||
		hasWordFold(query, "call") || hasWordFold(query, "execute")}
}

// lexer reads the tokens of one statement.
type lexer struct {
	q   string
	i   int
	bad bool // a comment it cannot read: MySQL's /*! ... */ runs its content
}

// savepointStmt reads SAVEPOINT, ROLLBACK TO and RELEASE statements, whole.
func (l *lexer) savepointStmt() (savepointStmt, bool) {
	var s savepointStmt
	switch strings.ToLower(l.word()) {
	case "savepoint":
		s.op = spSet
	case "release":
		s.op = spRelease
		l.keywordBeforeName("savepoint")
	case "rollback":
		s.op = spRollback
		if !l.keyword("work") {
			l.keyword("transaction")
		}
		if !l.keyword("to") {
			return s, false
		}
		l.keywordBeforeName("savepoint")
	default:
		return s, false
	}
	name, ok := l.name()
	if !ok {
		return s, false
	}
	s.name = name
	if l.i < len(l.q) && l.q[l.i] == ';' {
		l.i++
		l.skip()
	}
	return s, l.i == len(l.q) && !l.bad
}

// keyword consumes the word kw if it is next.
func (l *lexer) keyword(kw string) bool {
	at := l.i
	if strings.EqualFold(l.word(), kw) {
		return true
	}
	l.i = at
	return false
}

// keywordBeforeName consumes the word kw if it is next and a name follows it
// (in RELEASE savepoint, the word is the name).
func (l *lexer) keywordBeforeName(kw string) {
	at := l.i
	if !l.keyword(kw) {
		return
	}
	after := l.i
	if _, ok := l.name(); ok {
		l.i = after
		return
	}
	l.i = at
}

// word reads an unquoted word (a keyword or a name) and the space after it.
func (l *lexer) word() string {
	start := l.i
	for l.i < len(l.q) && isWordByte(l.q[l.i], l.i == start) {
		l.i++
	}
	w := l.q[start:l.i]
	l.skip()
	return w
}

// name reads a savepoint's name: a word, lowered, or a quoted name as written.
func (l *lexer) name() (string, bool) {
	if l.i >= len(l.q) {
		return "", false
	}
	if c := l.q[l.i]; c == '"' || c == '`' {
		var b strings.Builder
		for j := l.i + 1; j < len(l.q); j++ {
			if l.q[j] != c {
				b.WriteByte(l.q[j])
				continue
			}
			if j+1 < len(l.q) && l.q[j+1] == c { // a doubled quote stands for one
				b.WriteByte(c)
				j++
				continue
			}
			l.i = j + 1
			l.skip()
			return b.String(), b.Len() > 0
		}
		return "", false
	}
	w := l.word()
	return strings.ToLower(w), w != ""
}

// skip passes white space and comments.
func (l *lexer) skip() {
	for l.i < len(l.q) {
		switch c := l.q[l.i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.i++
		case strings.HasPrefix(l.q[l.i:], "--"):
			end := strings.IndexByte(l.q[l.i:], '\n')
			if end < 0 {
				l.i = len(l.q)
			} else {
				l.i += end + 1
			}
		case strings.HasPrefix(l.q[l.i:], "/*"):
			if strings.HasPrefix(l.q[l.i:], "/*!") || strings.HasPrefix(l.q[l.i:], "/*M!") {
				l.bad = true
			}
			depth, j := 0, l.i
			for j < len(l.q) {
				switch {
				case strings.HasPrefix(l.q[j:], "/*"):
					depth++
					j += 2
				case strings.HasPrefix(l.q[j:], "*/"):
					depth--
					j += 2
				default:
					j++
				}
				if depth == 0 {
					break
				}
			}
			if depth != 0 {
				l.bad = true
			}
			l.i = j
		default:
			return
		}
	}
}

func isWordByte(c byte, first bool) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && (c >= '0' && c <= '9' || c == '$')
}

// containsFold reports whether s contains the lower-case ASCII word w, in any case.
func containsFold(s, w string) bool {
	return indexFold(s, w, 0) >= 0
}

func indexFold(s, w string, from int) int {
	for i := from; i+len(w) <= len(s); i++ {
		if s[i]|0x20 == w[0] && strings.EqualFold(s[i:i+len(w)], w) {
			return i
		}
	}
	return -1
}

// hasWordFold reports whether s holds w, in any case, as a word of its own.
func hasWordFold(s, w string) bool {
	for i := indexFold(s, w, 0); i >= 0; i = indexFold(s, w, i+1) {
		if (i == 0 || !isWordByte(s[i-1], false)) && (i+len(w) == len(s) || !isWordByte(s[i+len(w)], false)) {
			return true
		}
	}
	return false
}

// statements remembers what each statement prepared through the plugin's pool
// or its transactions does to savepoints: with PrepareStmt, GORM runs every
// statement as a prepared one (txn.StmtContext), whose text it does not pass
// on. An entry goes when its *sql.Stmt is collected.
type statements struct {
	m sync.Map // weak.Pointer[sql.Stmt] -> savepointStmt
}

func (s *statements) remember(st *sql.Stmt, query string) {
	wp := weak.Make(st)
	if _, loaded := s.m.LoadOrStore(wp, parseStatement(query)); !loaded {
		runtime.AddCleanup(st, func(wp weak.Pointer[sql.Stmt]) { s.m.Delete(wp) }, wp)
	}
}

func (s *statements) lookup(st *sql.Stmt) (savepointStmt, bool) {
	v, ok := s.m.Load(weak.Make(st))
	if !ok {
		return savepointStmt{}, false
	}
	return v.(savepointStmt), true
}
