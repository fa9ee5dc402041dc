import re
md=open('/work/shared/research/zab.md').read().split('\n')
def table_after(title_re):
    for i,l in enumerate(md):
        if re.search(title_re,l):
            j=i+1
            while not md[j].startswith('|'): j+=1
            rows=[]
            while j<len(md) and md[j].startswith('|'):
                cells=[c.strip() for c in md[j].strip('|').split('|')]
                rows.append(cells); j+=1
            return rows[0],rows[2:]
    raise Exception(title_re)
def pct(c):
    c=c.strip().rstrip('%')
    return float(c)
NaN='f64::NAN'
def grid8(title, cols):  # returns dict name->[[4]*10]
    h,rows=table_after(title)
    out={}
    for name,idx in cols.items():
        g=[]
        for r in rows:
            g.append([ (pct(r[i]) if i is not None else None) for i in idx])
        out[name]=g
    return out
def fmt(g):
    return '[' + ', '.join('[' + ', '.join(('f64::NAN' if v is None else repr(float(v)))  for v in row) + ']' for row in g) + ']'
lat=[];thr=[];acks=[];ps=[]
L=[1,2,3,4];T=[5,6,7,8]
# Table 5.1
h,rows=table_after(r'\*\*Table 5\.1 ')
lat.append(('zab-ac',False,[[pct(r[1]),None,None,None] for r in rows]))
thr.append(('zab-ac',False,[[pct(r[2]),None,None,None] for r in rows]))
for t,proto,wait in [('E\\.1','zab-aa-restricted',False),('E\\.2','zab-ct-restricted',False),('E\\.3','zab-aa',False),('E\\.4','zab-ct-half',False),('E\\.5','zab-ct',False),('E\\.6','zab-ct',True),('E\\.8','zab-ct-a',False),('E\\.9','zab-ct-a',True),('E\\.11','zab-ct-aa',False),('E\\.12','zab-ct-aa',True)]:
    h,rows=table_after(r'\*\*Table %s '%t)
    lat.append((proto,wait,[[pct(r[i]) for i in L] for r in rows]))
    thr.append((proto,wait,[[pct(r[i]) for i in T] for r in rows]))
h,rows=table_after(r'\*\*Table D\.3 ')
lat.append(('zab-ct-optimal',False,[[pct(r[i]) for i in L] for r in rows]))
lat.append(('zab-ct-optimal',True,[[pct(r[i]) for i in T] for r in rows]))
for t,proto,wait in [('5\\.2','zab-ct',False),('E\\.7','zab-ct',True),('5\\.3','zab-ct-a',False),('E\\.10','zab-ct-a',True),('E\\.13','zab-ct-aa',False),('E\\.14','zab-ct-aa',True),('D\\.1','zab-ct-optimal',False),('D\\.2','zab-ct-optimal',True)]:
    h,rows=table_after(r'\*\*Table %s '%t)
    acks.append((proto,wait,[[pct(r[i]) for i in L] for r in rows]))
    ps.append((proto,wait,[[pct(r[i]) for i in T] for r in rows]))
# App F compact
lam=[];dd=[]
for title,proto,wait in [(r'\*\*ZabCT_u, zero wait-time \(F','zab-ct',False),(r'\*\*ZabCT_u, wait-time','zab-ct',True),(r'\*\*ZabCT_a, zero wait-time \(F','zab-ct-a',False),(r'\*\*ZabCT_a, wait-time','zab-ct-a',True),(r'\*\*ZabCT_aa, zero wait-time \(F','zab-ct-aa',False),(r'\*\*ZabCT_aa, wait-time','zab-ct-aa',True)]:
    h,rows=table_after(title)
    gl=[];gd=[]
    for r in rows:
        cl=[];cd=[]
        for c in r[1:5]:
            parts=[x.strip() for x in c.split(';')]
            cl.append(float(parts[0])); cd.append(float(parts[1])*1000)
        gl.append(cl);gd.append(cd)
    lam.append((proto,wait,gl));dd.append((proto,wait,gd))
def emit(name,doc,items):
    s='/// %s\npub const %s: &[(&str, bool, Grid)] = &[\n'%(doc,name)
    for p,w,g in items:
        s+='    ("%s", %s, %s),\n'%(p,'true' if w else 'false',fmt(g))
    return s+'];\n\n'
out='''//! The thesis's reported figures ([T], as extracted in ../shared/research/zab.md §8.6),
//! generated from that file's tables by a script and kept verbatim: rows are WR = 10 … 100 %,
//! columns N = 3, 5, 7, 9; NaN where the thesis reports nothing. Each entry is (protocol,
//! with the (25, 75) ms wait-time, grid).

/// Rows WR = 10, 20, …, 100 %; columns N = 3, 5, 7, 9.
pub type Grid = [[f64; 4]; 10];

'''
out+=emit('LATENCY','Latency improvement over Zab, % (Tables 5.1, E.1–E.6, E.8, E.9, E.11, E.12, D.3).',lat)
out+=emit('THROUGHPUT','Throughput improvement over Zab, % (Tables 5.1, E.1–E.6, E.8, E.9, E.11, E.12).',thr)
out+=emit('ACKS','Follower acks received by the leader per commit (Tables 5.2, 5.3, E.7, E.10, E.13, E.14, D.1, D.2).',acks)
out+=emit('COIN_P','The coin probability p; 1 = infeasible, Zab ran (same tables).',ps)
out+=emit('LAMBDA','λ, abcasts per second measured by followers (App. F, compact form of zab.md §8.6.6).',lam)
out+=emit('D_MS','d, the leader → follower delay, in ms (App. F).',dd)
open('/work/main/crates/synod/src/experiment/thesis_data.rs','w').write(out)
